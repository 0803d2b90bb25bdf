package mappings

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// CheckSQL runs the SQL the mappings carry — every where: and every
// fields: expression, each on its own over its table, as SELECT … LIMIT 0,
// which PostgreSQL parses and plans but reads no row for — and returns
// what PostgreSQL refuses, at the mapping's file:line:column with
// PostgreSQL's own message. It also records each field's type (Field.Type)
// for the Elasticsearch mapping. A filter or expression reads its node's
// row only: a name that is not one of the table's columns is refused here
// even where the build statement would find it in an enclosing row.
func CheckSQL(ctx context.Context, db Querier, model *Model) error {
	var errs ErrorList
	for _, a := range model.Aggregates {
		var walk func(n *Node)
		walk = func(n *Node) {
			if n.Where != "" {
				if _, err := probe(ctx, db, n.Table, "1", "WHERE ("+n.Where+")", n.Where, n.whereAt, "where", "filter"); err != nil {
					errs = append(errs, err)
				}
			}
			for i := range n.Fields {
				f := &n.Fields[i]
				var t string
				var err *Error
				switch {
				case f.Expr != "":
					t, err = probe(ctx, db, n.Table, "("+f.Expr+")", "", f.Expr, f.at, "fields."+f.Name, "expression")
				case f.Column != "":
					t, err = probe(ctx, db, f.Relation.Table, f.Func+"("+ident(f.Column)+")", "", "", f.at, "fields."+f.Name, "aggregate")
				}
				if err != nil {
					errs = append(errs, err)
				}
				if t != "" {
					f.Type = t
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

// probe runs SELECT <sel> FROM <table> <tail> LIMIT 0 and returns the
// type of its one column, or PostgreSQL's refusal at `at`. user is the
// part the mapping wrote (for the character position), what names it.
func probe(ctx context.Context, db Querier, table TableName, sel, tail, user string, at pos, key, what string) (string, *Error) {
	sql := "SELECT " + sel + " FROM " + table.Sanitize() + " " + tail + " LIMIT 0"
	rows, err := db.Query(ctx, sql)
	var oid uint32
	if err == nil {
		if fds := rows.FieldDescriptions(); len(fds) == 1 {
			oid = fds[0].DataTypeOID
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		var pg *pgconn.PgError
		if !errors.As(err, &pg) {
			return "", at.errorf("%s: cannot check the %s: %v", key, what, err)
		}
		where := ""
		if i := indexRunes(sql, user); user != "" && i >= 0 {
			if off := int(pg.Position) - i; pg.Position > 0 && off >= 1 && off <= len([]rune(user)) {
				where = fmt.Sprintf(" (at character %d of the %s)", off, what)
			}
		}
		return "", at.errorf("%s: PostgreSQL refuses the %s on %s: %s%s; %s", key, what, table, pg.Message, where, map[string]string{
			"filter":     "a filter is a SQL boolean over that table's columns, e.g. deleted_at IS NULL AND published",
			"expression": "a field is a SQL expression over that table's columns, e.g. first_name || ' ' || last_name",
			"aggregate":  "the function must accept that column's type (sum and avg take numbers)",
		}[what])
	}
	var name string
	trows, err := db.Query(ctx, "SELECT format_type($1::oid, NULL)", oid)
	if err == nil {
		for trows.Next() {
			_ = trows.Scan(&name)
		}
		trows.Close()
	}
	return name, nil
}

// indexRunes is the rune offset of sub in s, or -1.
func indexRunes(s, sub string) int {
	for i := range s {
		if len(s)-i >= len(sub) && s[i:i+len(sub)] == sub {
			return len([]rune(s[:i]))
		}
	}
	return -1
}
