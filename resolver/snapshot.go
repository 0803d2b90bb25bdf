package resolver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/wire"
)

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

// walLSNSQL reads the WAL position builds are versioned with:
// pg_current_wal_lsn(), or on a hot standby the replayed position.
const walLSNSQL = `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text`

// openSnapshot reads pg_current_wal_lsn() (one statement), then begins a
// REPEATABLE READ transaction whose first statement takes the snapshot and
// reads its xmax, and checks that every xid is visible in it. When some
// are not (their commit is in the WAL but not yet visible), it retries
// with a new transaction every 20ms until timeout. Because the LSN is read
// before the snapshot is taken, a build that starts later gets a version
// at least as high and a snapshot that sees at least as much: versions
// order builds the way their snapshots are ordered.
//
// On a hot standby (16+) the position is pg_last_wal_replay_lsn(): a
// snapshot taken after it sees every transaction whose commit was replayed
// by then, the same LSN space as the primary's, and never ahead of what
// the primary's pg_current_wal_lsn() gives later, so builds on the primary
// and on its standbys order the same way (walLSNSQL).
func openSnapshot(ctx context.Context, conn *pgxpool.Conn, xids []uint32, timeout time.Duration) (*snapshot, error) {
	deadline := time.Now().Add(timeout)
	for {
		var lsnText string
		if err := conn.QueryRow(ctx, walLSNSQL).Scan(&lsnText); err != nil {
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
		if !ctxtime.Sleep(ctx, 20*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}
