package streamer

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	e.waitStandbyCaughtUp(standby)
	recs := e.readTopic(wire.RawTopic(k.Prefix, "public", "w"))
	dups := verifyLog(t, recs, w.log, cp)
	sameState(t, lastPerKey(recs), e.tableState("w", `jsonb_build_object('id', id)::text`))
	e.stop()
	if _, err := standby.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, e.cfg.Slot); err != nil {
		t.Logf("drop slot %s on the standby: %v", e.cfg.Slot, err)
	}
	t.Logf("standby: changes=%d (after the consistent point %s: all present) records=%d duplicates=%d", len(w.log), wire.FormatLSN(cp), len(recs), dups)
}

// waitStandbyCaughtUp waits until the slot on the standby has confirmed
// the primary's WAL position as it is now.
func (e *env) waitStandbyCaughtUp(standby *pgxpool.Pool) {
	e.t.Helper()
	var target string
	if err := e.pg.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		e.t.Fatal(err)
	}
	testenv.WaitFor(e.t, "the standby's slot "+e.cfg.Slot+" to confirm the primary's "+target, 2*time.Minute, func() (bool, error) {
		var ok bool
		err := standby.QueryRow(context.Background(),
			`SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Slot, target).Scan(&ok)
		return ok, err
	})
}

// TestKillNineOnStandby (issue 16): the streamer decodes from a hot
// standby and is killed with SIGKILL at random moments while the primary
// takes writes; after its restarts every change committed on the primary
// is in Kafka and the last record per key equals the table (PRODUCT.md
// §6.1, as TestKillNineNoLoss on a primary). Duplicates are allowed.
func TestKillNineOnStandby(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, `CREATE TABLE w (id int PRIMARY KEY, n int NOT NULL); CREATE PUBLICATION decant FOR ALL TABLES`)
	standbyDSN := testenv.Standby(t, pg)
	k := testenv.Kafka(t)
	e := &env{t: t, pg: pg, k: k, cfg: newEnvConfig(pg, k)}
	e.cfg.DSN = standbyDSN
	standby, err := pgxpool.New(context.Background(), standbyDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // see TestStreamFromStandby
		for ctx.Err() == nil {
			_, _ = pg.Pool.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	w := newWorkload(0)
	c := e.startChild("streamer-0")
	e.waitSnapshotMarker()
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, t, pg, 20000) }()
	rng := rand.New(rand.NewPCG(5, 6))
	kills := 0
	for kills < 3 {
		select {
		case <-done:
		case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
		}
		c.Kill()
		kills++
		t.Logf("kill -9 #%d after %d changes", kills, w.ops)
		c = e.startChild(fmt.Sprintf("streamer-%d", kills))
	}
	<-done
	e.waitStandbyCaughtUp(standby)
	recs := e.readTopic(wire.RawTopic(k.Prefix, "public", "w"))
	dups := verifyLog(t, recs, w.log, 0)
	sameState(t, lastPerKey(recs), e.tableState("w", `jsonb_build_object('id', id)::text`))
	c.Term(60 * time.Second)
	if _, err := standby.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, e.cfg.Slot); err != nil {
		t.Logf("drop slot %s on the standby: %v", e.cfg.Slot, err)
	}
	t.Logf("standby: changes=%d kills=%d events=%d duplicates=%d", len(w.log), kills, len(recs), dups)
}
