package streamer

import (
	"context"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// TestFailoverSlotOption: on a PostgreSQL 17+ primary, slot_failover
// false creates a slot without the failover option, and a later start
// with auto (the default) turns it into a failover slot, keeping its
// position (no second snapshot); true on a server that cannot is refused
// before any slot is created (TestWantFailover has the rules). The
// failover itself is e2e/binary's TestFailoverContinuesOnPromotedStandby.
func TestFailoverSlotOption(t *testing.T) {
	e := newEnv(t, `CREATE TABLE f (id int PRIMARY KEY); INSERT INTO f SELECT generate_series(1, 10)`)
	ctx := context.Background()
	if major, err := testenv.ServerMajor(ctx, e.pg.Pool); err != nil {
		t.Fatal(err)
	} else if major < 17 {
		t.Skipf("failover slots need PostgreSQL 17+; this run uses PostgreSQL %d (make test-pg runs it on 17 and 18)", major)
	}
	failover := func() bool {
		var on bool
		if err := e.pg.Pool.QueryRow(ctx, `SELECT failover FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Slot).Scan(&on); err != nil {
			t.Fatalf("slot %s: %v", e.cfg.Slot, err)
		}
		return on
	}
	e.cfg.SlotFailover = "false"
	e.start()
	e.waitSnapshotMarker()
	e.stop()
	if failover() {
		t.Fatalf("slot_failover false: slot %s has failover = true", e.cfg.Slot)
	}
	e.cfg.SlotFailover = "auto"
	e.start()
	testenv.WaitFor(t, "slot "+e.cfg.Slot+" to become a failover slot", 30*time.Second, func() (bool, error) { return failover(), nil })
	e.pg.Exec(t, `INSERT INTO f VALUES (11)`)
	recs := e.waitRecords(wire.RawTopic(e.cfg.TopicPrefix, "public", "f"), 11)
	e.stop()
	reads := 0
	for _, r := range recs {
		if r.Value != nil && r.Value.Op == wire.OpRead {
			reads++
		}
	}
	if reads != 10 {
		t.Errorf("%d snapshot rows, want the 10 of one snapshot", reads)
	}
}
