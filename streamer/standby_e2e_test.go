package streamer

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// TestStreamFromStandby is acceptance 2 of issue 16 for the streamer: on
// PostgreSQL 16+, postgres.dsn may be a hot standby. The streamer creates
// its slot there, snapshots the standby inside the slot's exported
// snapshot and streams while the primary writes; every change committed on
// the primary is in Kafka and the last record per key equals the primary's
// table. The primary logs a standby snapshot every 200ms: a standby creates
// a logical slot only once a running-transactions record from the primary
// reaches it, which an idle primary writes only every 15 s.
func TestStreamFromStandby(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, `CREATE TABLE w (id int PRIMARY KEY, n int NOT NULL);
		INSERT INTO w SELECT g, 0 FROM generate_series(1, 2000) g;
		CREATE PUBLICATION decant FOR ALL TABLES`)
	standbyDSN := testenv.Standby(t, pg)
	k := testenv.Kafka(t)
	e := &env{t: t, pg: pg, k: k, cfg: newEnvConfig(pg, k)}
	e.cfg.DSN = standbyDSN

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			_, _ = pg.Pool.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	w := newWorkload(2000)
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, t, pg, 20000) }() // writes during the snapshot too
	e.start()
	cp := e.waitSnapshotMarker()
	<-done

	standby, err := pgxpool.New(context.Background(), standbyDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	var target string
	if err := pg.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the standby's slot "+e.cfg.Slot+" to confirm the primary's "+target, 2*time.Minute, func() (bool, error) {
		var ok bool
		err := standby.QueryRow(context.Background(),
			`SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Slot, target).Scan(&ok)
		return ok, err
	})
	recs := e.readTopic(wire.RawTopic(k.Prefix, "public", "w"))
	dups := verifyLog(t, recs, w.log, cp)
	sameState(t, lastPerKey(recs), e.tableState("w", `jsonb_build_object('id', id)::text`))
	e.stop()
	if _, err := standby.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, e.cfg.Slot); err != nil {
		t.Logf("drop slot %s on the standby: %v", e.cfg.Slot, err)
	}
	t.Logf("standby: changes=%d (after the consistent point %s: all present) records=%d duplicates=%d", len(w.log), wire.FormatLSN(cp), len(recs), dups)
}
