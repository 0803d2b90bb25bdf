package resolver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// SessionParams are the session settings documents are built under. They
// fix the text of every to_jsonb value (timestamps in UTC, shortest exact
// floats, hex bytea), so that ids built here equal the raw topics' keys
// and documents do not depend on the server's defaults. NewPool sets them.
var SessionParams = map[string]string{
	"TimeZone":           "UTC",
	"DateStyle":          "ISO, MDY",
	"IntervalStyle":      "postgres",
	"bytea_output":       "hex",
	"extra_float_digits": "1",
}

// NewPool connects a pool for the resolver with SessionParams set.
// maxConns 0 keeps pgxpool's default.
func NewPool(ctx context.Context, dsn, applicationName string, maxConns int32) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("resolver: postgres.dsn: %w", err)
	}
	for k, v := range SessionParams {
		pc.ConnConfig.RuntimeParams[k] = v
	}
	if applicationName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = applicationName
	}
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("resolver: connect to postgres: %w", err)
	}
	return pool, nil
}

// errNotVisible means the transactions that caused a batch did not become
// visible in time: the batch is retried from Kafka.
var errNotVisible = errors.New("transactions of the batch are not visible yet")

// snapshot is a REPEATABLE READ, READ ONLY transaction in whose snapshot
// every transaction of a batch is visible, and the WAL position read just
// before it was taken (the version of what is built in it).
type snapshot struct {
	tx  pgx.Tx
	lsn uint64
}

// openSnapshot reads pg_current_wal_lsn() (one statement), then begins a
// REPEATABLE READ transaction whose first statement takes the snapshot and
// reads its xmax, and checks that every xid is visible in it. When some
// are not (their commit is in the WAL but not yet visible), it retries
// with a new transaction every 20ms until timeout. Because the LSN is read
// before the snapshot is taken, a build that starts later gets a version
// at least as high and a snapshot that sees at least as much: versions
// order builds the way their snapshots are ordered.
func openSnapshot(ctx context.Context, conn *pgxpool.Conn, xids []uint32, timeout time.Duration) (*snapshot, error) {
	deadline := time.Now().Add(timeout)
	for {
		var lsnText string
		if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsnText); err != nil {
			return nil, fmt.Errorf("read pg_current_wal_lsn(): %w", err)
		}
		lsn, err := wire.ParseLSN(lsnText)
		if err != nil {
			return nil, err
		}
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return nil, fmt.Errorf("begin: %w", err)
		}
		var xmaxText string
		if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&xmaxText); err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("read snapshot xmax: %w", err)
		}
		if len(xids) == 0 {
			return &snapshot{tx: tx, lsn: lsn}, nil
		}
		xmax, err := strconv.ParseUint(xmaxText, 10, 64)
		if err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("snapshot xmax %q: %w", xmaxText, err)
		}
		full := make([]string, len(xids))
		for i, x := range xids {
			full[i] = strconv.FormatUint(fullXID(x, xmax), 10)
		}
		var invisible int
		err = tx.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]::xid8[]) AS x WHERE NOT pg_visible_in_snapshot(x, pg_current_snapshot())`, full).Scan(&invisible)
		if err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("check visibility of xids %s: %w", strings.Join(full, ","), err)
		}
		if invisible == 0 {
			return &snapshot{tx: tx, lsn: lsn}, nil
		}
		_ = tx.Rollback(ctx)
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %d of %d still invisible after %s", errNotVisible, invisible, len(xids), timeout)
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// rootIDs calls fn with the key of every row of a's root table, in id
// order, reading pageSize rows per statement (keyset pagination on the id
// columns): memory stays bounded whatever the table size.
func rootIDs(ctx context.Context, db mappings.Querier, a *mappings.Aggregate, pageSize int, fn func(key []byte) error) error {
	n := len(a.ID)
	cols := make([]string, n)
	sel := make([]string, 0, 2*n)
	// Columns are qualified with the table alias r: the output column of
	// "id"::text is named id too, and an unqualified ORDER BY "id" would
	// sort by that text ("10" before "9") while the keyset condition
	// compares the typed column, skipping ids past the first page.
	for i, c := range a.ID {
		cols[i] = "r." + pgx.Identifier{c}.Sanitize()
		sel = append(sel, "to_jsonb("+cols[i]+")")
	}
	for i := range a.ID {
		sel = append(sel, cols[i]+"::text")
	}
	params := make([]string, n)
	for i, t := range a.IDTypes {
		params[i] = fmt.Sprintf("$%d::text::%s", i+1, t)
	}
	base := fmt.Sprintf("SELECT %s FROM %s AS r", strings.Join(sel, ", "), a.Table.Sanitize())
	order := fmt.Sprintf(" ORDER BY %s LIMIT %d", strings.Join(cols, ", "), pageSize)
	first := base + order
	next := fmt.Sprintf("%s WHERE (%s) > (%s)%s", base, strings.Join(cols, ", "), strings.Join(params, ", "), order)
	var cursor []any
	for {
		sql, args := first, []any(nil)
		if cursor != nil {
			sql, args = next, cursor
		}
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("aggregate %s: read ids of %s: %w", a.Name, a.Table, err)
		}
		count := 0
		vals := make([][]byte, n)
		texts := make([]string, n)
		dest := make([]any, 2*n)
		for i := range n {
			dest[i] = &vals[i]
			dest[n+i] = &texts[i]
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return fmt.Errorf("aggregate %s: read ids of %s: %w", a.Name, a.Table, err)
			}
			count++
			raw := make([]json.RawMessage, n)
			for i := range n {
				raw[i] = append(json.RawMessage(nil), vals[i]...)
			}
			if err := fn(idKey(a, raw)); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("aggregate %s: read ids of %s: %w", a.Name, a.Table, err)
		}
		if count < pageSize {
			return nil
		}
		cursor = make([]any, n)
		for i := range n {
			cursor[i] = texts[i]
		}
	}
}
