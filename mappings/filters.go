package mappings

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// CheckFilters runs every where: of model against the database — each as
// SELECT 1 FROM <its table> WHERE (<filter>) LIMIT 0, which PostgreSQL
// parses and plans but reads no row for — and returns what PostgreSQL
// refuses, at the filter's file:line:column with PostgreSQL's own message.
// A filter reads its node's row only: a name that is not one of the
// table's columns is refused here even when the build statement would
// find it in an enclosing row.
func CheckFilters(ctx context.Context, db Querier, model *Model) error {
	var errs ErrorList
	for _, a := range model.Aggregates {
		var walk func(n *Node)
		walk = func(n *Node) {
			if n.Where != "" {
				if err := checkFilter(ctx, db, n); err != nil {
					errs = append(errs, err)
				}
			}
			for _, c := range n.Children {
				walk(c)
			}
		}
		walk(a.Root)
	}
	return errs.err()
}

func checkFilter(ctx context.Context, db Querier, n *Node) *Error {
	prefix := "SELECT 1 FROM " + n.Table.Sanitize() + " WHERE ("
	rows, err := db.Query(ctx, prefix+n.Where+") LIMIT 0")
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err == nil {
		return nil
	}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return n.whereAt.errorf("where: cannot check the filter: %v", err)
	}
	at := ""
	if off := int(pg.Position) - len([]rune(prefix)); pg.Position > 0 && off >= 1 && off <= len([]rune(n.Where)) {
		at = fmt.Sprintf(" (at character %d of the filter)", off)
	}
	e := n.whereAt.errorf("where: PostgreSQL refuses the filter on %s: %s%s; a filter is a SQL boolean over that table's columns, e.g. deleted_at IS NULL AND published", n.Table, pg.Message, at)
	return e
}
