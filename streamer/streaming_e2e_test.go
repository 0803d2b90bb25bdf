package streamer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// TestStreamedInProgressTransactions: with logical_decoding_work_mem at its
// minimum, PostgreSQL streams large transactions before they commit
// (protocol 2). Decant spools them and emits only what committed: a
// subtransaction rolled back to its savepoint and a whole aborted
// transaction emit nothing, a small transaction committed meanwhile comes
// first, and a column added inside the streamed transaction is in its rows.
// Rows are encoded while they stream unless a column changed inside the
// transaction.
func TestStreamedInProgressTransactions(t *testing.T) {
	e := newEnv(t, `CREATE TABLE s (id int PRIMARY KEY, v text, n int)`)
	sep := "?"
	if strings.Contains(e.cfg.DSN, "?") {
		sep = "&"
	}
	e.cfg.DSN += sep + "options=-c%20logical_decoding_work_mem%3D64kB"
	reg := prometheus.NewRegistry()
	e.cfg.Registerer = reg
	e.start()
	e.waitSnapshotMarker()
	ctx := context.Background()

	big, err := e.pg.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Release()
	exec := func(sql string) {
		t.Helper()
		if _, err := big.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	pad := "repeat(md5(g::text), 4)"
	exec(`BEGIN`)
	exec(`INSERT INTO s SELECT g, 'keep ' || ` + pad + `, 0 FROM generate_series(1, 5000) g`)
	exec(`SAVEPOINT a`)
	exec(`INSERT INTO s SELECT g, 'sub rolled back ' || ` + pad + `, 0 FROM generate_series(5001, 10000) g`)
	exec(`ROLLBACK TO a`)
	exec(`INSERT INTO s SELECT g, 'keep ' || ` + pad + `, 0 FROM generate_series(10001, 15000) g`)
	// A small transaction commits while the large one is open (and already
	// partly streamed): it must come out first, whole.
	e.pg.Exec(t, `INSERT INTO s VALUES (100001, 'small', 0)`)
	exec(`ALTER TABLE s ADD COLUMN extra int`)
	exec(`INSERT INTO s SELECT g, 'keep ' || ` + pad + `, 0, 42 FROM generate_series(15001, 16000) g`)
	exec(`SAVEPOINT b`)
	exec(`UPDATE s SET n = 1 WHERE id <= 100`)
	exec(`RELEASE b`)
	// Rows that push the ones above out of PostgreSQL's memory; then wait
	// for decant to spool them before the commit, so the column added above
	// is not yet in the catalog when decant sees them.
	exec(`INSERT INTO s SELECT g, 'keep ' || ` + pad + `, 0, 42 FROM generate_series(20001, 25000) g`)
	for deadline := time.Now().Add(time.Minute); e.s.encodedAtCommit.Load() < 1100; {
		if time.Now().After(deadline) {
			t.Fatalf("decant spooled %d rows as messages, want the 1,100 after ADD COLUMN", e.s.encodedAtCommit.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	exec(`COMMIT`)
	exec(`BEGIN`)
	exec(`INSERT INTO s SELECT g, 'aborted big ' || ` + pad + `, 0 FROM generate_series(200001, 210000) g`)
	// Roll back only once PostgreSQL has streamed part of it: from 18 on,
	// a transaction the reorder buffer already knows aborted when it
	// exceeds logical_decoding_work_mem is discarded, not streamed, and
	// the abort of a streamed transaction would go untested.
	testenv.WaitFor(t, "PostgreSQL to stream the transaction to be aborted", time.Minute, func() (bool, error) {
		return gatherCounter(t, reg, "decant_streamer_spooled_transactions_total") >= 2, nil
	})
	exec(`ROLLBACK`)
	e.pg.Exec(t, `INSERT INTO s VALUES (100002, 'after', 0, 1)`)
	e.waitCaughtUp(2 * time.Minute)

	recs := e.waitRecords(wire.RawTopic(e.k.Prefix, "public", "s"), 5000+5000+1000+2+100+5000)
	var bigCommit, smallCommit uint64
	var bigXID uint32
	var lastSeq int64 = -1
	inserted := map[int]bool{}
	updated := 0
	for _, r := range recs {
		if r.Value == nil {
			continue
		}
		var row struct {
			ID    int
			V     string
			N     int
			Extra *int
		}
		if err := json.Unmarshal(r.Value.After, &row); err != nil {
			t.Fatalf("bad after in %s: %v", r.Raw, err)
		}
		if strings.Contains(row.V, "rolled back") || strings.Contains(row.V, "aborted") {
			t.Fatalf("uncommitted row emitted: %s", r.Raw)
		}
		commit, err := wire.ParseLSN(r.Value.Source.CommitLSN)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case row.ID == 100001:
			smallCommit = commit
			continue
		case row.ID == 100002:
			continue
		}
		// Every row of the large transaction: one commit LSN, one xid,
		// sequence numbers increasing in WAL order.
		if bigCommit == 0 {
			bigCommit, bigXID = commit, r.Value.Source.XID
		}
		if commit != bigCommit || r.Value.Source.XID != bigXID {
			t.Fatalf("row of the large transaction with commit %s xid %d, want %s xid %d: %s",
				r.Value.Source.CommitLSN, r.Value.Source.XID, wire.FormatLSN(bigCommit), bigXID, r.Raw)
		}
		if r.Value.Source.Seq <= lastSeq {
			t.Fatalf("seq %d after %d: %s", r.Value.Source.Seq, lastSeq, r.Raw)
		}
		lastSeq = r.Value.Source.Seq
		switch r.Value.Op {
		case wire.OpCreate:
			if (row.ID > 15000) != (row.Extra != nil && *row.Extra == 42) {
				t.Fatalf("row %d: extra = %v, want 42 only for rows inserted after ADD COLUMN: %s", row.ID, row.Extra, r.Raw)
			}
			inserted[row.ID] = true
		case wire.OpUpdate:
			if row.N != 1 || row.ID > 100 {
				t.Fatalf("unexpected update %s", r.Raw)
			}
			updated++
		}
	}
	for id := 1; id <= 25000; id++ {
		if inserted[id] != (id <= 5000 || (id > 10000 && id <= 16000) || id > 20000) {
			t.Fatalf("row %d: inserted = %v", id, inserted[id])
		}
	}
	if updated != 100 {
		t.Fatalf("updates = %d, want 100", updated)
	}
	if smallCommit == 0 || smallCommit >= bigCommit {
		t.Fatalf("small transaction commit %s, large %s: the small one committed first", wire.FormatLSN(smallCommit), wire.FormatLSN(bigCommit))
	}
	// Both large transactions were streamed by PostgreSQL and spooled.
	spooled := gatherCounter(t, reg, "decant_streamer_spooled_transactions_total")
	if spooled < 2 {
		t.Fatalf("spooled transactions = %v, want ≥ 2 (PostgreSQL did not stream them in progress)", spooled)
	}
	// Rows are encoded as they stream while the relation's columns and key
	// are those of the catalog: the 15,000 rows of the large transaction
	// before its ADD COLUMN (5,000 of them rolled back, and skipped at
	// commit), maybe some padding, and what PostgreSQL streamed of the
	// aborted one before its abort. The 1,100 after the ADD COLUMN were
	// spooled as messages (waited for above) and decoded at commit.
	early := e.s.encodedEarly.Load()
	if early < 15000 {
		t.Fatalf("%d rows encoded before their commit, want ≥ 15,000", early)
	}
	t.Logf("%d records; %v transactions streamed in progress and spooled; %d rows encoded before commit", len(recs), spooled, early)
}

// gatherCounter reads one counter (summed over labels) from reg.
func gatherCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		return sum
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// TestLongReplayKeepsTheConnection: replaying a streamed transaction reads
// nothing from the server, and with Kafka slow to acknowledge it can take
// longer than wal_sender_timeout. Status updates sent during the replay
// keep the walsender from dropping the connection; without them the
// transaction would be sent again and replayed again, forever.
func TestLongReplayKeepsTheConnection(t *testing.T) {
	e := newEnv(t, `CREATE TABLE r (id int PRIMARY KEY, v text)`)
	sep := "?"
	if strings.Contains(e.cfg.DSN, "?") {
		sep = "&"
	}
	e.cfg.DSN += sep + "options=-c%20logical_decoding_work_mem%3D64kB%20-c%20wal_sender_timeout%3D1s"
	e.cfg.MaxInFlight = 20 // each few records wait for an acknowledgement
	reg := prometheus.NewRegistry()
	e.cfg.Registerer = reg
	e.start()
	e.waitSnapshotMarker()
	const rows = 60000
	e.pg.Exec(t, fmt.Sprintf(`INSERT INTO r SELECT g, repeat('x', 50) FROM generate_series(1, %d) g`, rows))
	started := time.Now()
	e.waitCaughtUp(2 * time.Minute)
	took := time.Since(started)
	if spooled := gatherCounter(t, reg, "decant_streamer_spooled_transactions_total"); spooled < 1 {
		t.Fatalf("the transaction was not streamed in progress (spooled %v)", spooled)
	}
	// Exactly once: a dropped connection would have replayed it again.
	recs := e.fetch(wire.RawTopic(e.k.Prefix, "public", "r"), false)
	if len(recs) != rows {
		t.Fatalf("%d records, want %d (the transaction was replayed more than once)", len(recs), rows)
	}
	if took < 2*time.Second {
		t.Logf("the replay took %s, under twice wal_sender_timeout: this run proves little", took)
	}
	t.Logf("%d rows replayed in %s with wal_sender_timeout=1s", rows, took)
}
