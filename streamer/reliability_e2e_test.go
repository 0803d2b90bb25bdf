package streamer

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// heavy reports whether the full-size variants run (make test-heavy).
func heavy() bool { return os.Getenv("DECANT_HEAVY") == "1" }

// change is one committed change of the workload: row id and counter n
// (insert n=0, each update n+1), or a delete.
type change struct {
	id, n   int
	deleted bool
	minLSN  uint64 // an LSN read inside the transaction: its commit is after it
}

// workload writes changes to table w(id int primary key, n int) in
// transactions of 1–20 changes and logs every committed one.
type workload struct {
	mu      sync.Mutex
	log     []change
	live    []int
	rows    map[int]int
	nextID  int
	ops     int
	rng     *rand.Rand
	lastLSN uint64
}

func newWorkload(seedRows int) *workload {
	w := &workload{rows: map[int]int{}, nextID: seedRows + 1, rng: rand.New(rand.NewPCG(1, 2))}
	for i := 1; i <= seedRows; i++ {
		w.rows[i] = 0
		w.live = append(w.live, i)
	}
	return w
}

// run performs total changes, then returns. It stops early when ctx ends.
func (w *workload) run(ctx context.Context, t *testing.T, pg *testenv.PG, total int) {
	for w.ops < total && ctx.Err() == nil {
		tx, err := pg.Pool.Begin(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.Errorf("workload begin: %v", err)
			return
		}
		var lsnText string
		if err := tx.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsnText); err != nil {
			// Roll back even when ctx ended: a transaction left open keeps its
			// connection, and the pool's Close at cleanup waits for it forever
			// (a make test run hung 25 minutes on it).
			_ = tx.Rollback(context.Background())
			if ctx.Err() != nil {
				return
			}
			t.Errorf("workload: %v", err)
			return
		}
		lsn, _ := wire.ParseLSN(lsnText)
		var batch []change
		n := 1 + w.rng.IntN(20)
		pending := map[int]int{}
		deleted := map[int]bool{}
		for i := 0; i < n; i++ {
			switch r := w.rng.IntN(10); {
			case r < 3 || len(w.live) < 10:
				id := w.nextID
				w.nextID++
				_, err = tx.Exec(ctx, "INSERT INTO w VALUES ($1, 0)", id)
				batch = append(batch, change{id: id, minLSN: lsn})
				pending[id] = 0
			case r < 9:
				id := w.live[w.rng.IntN(len(w.live))]
				if deleted[id] {
					continue
				}
				cur, ok := pending[id]
				if !ok {
					cur = w.rows[id]
				}
				_, err = tx.Exec(ctx, "UPDATE w SET n = $2 WHERE id = $1", id, cur+1)
				batch = append(batch, change{id: id, n: cur + 1, minLSN: lsn})
				pending[id] = cur + 1
			default:
				id := w.live[w.rng.IntN(len(w.live))]
				if deleted[id] {
					continue
				}
				_, err = tx.Exec(ctx, "DELETE FROM w WHERE id = $1", id)
				batch = append(batch, change{id: id, deleted: true, minLSN: lsn})
				deleted[id] = true
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			err = tx.Commit(ctx)
		} else {
			_ = tx.Rollback(context.Background())
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.Errorf("workload: %v", err)
			return
		}
		w.mu.Lock()
		for _, c := range batch {
			if c.deleted {
				delete(w.rows, c.id)
			} else {
				w.rows[c.id] = c.n
			}
		}
		w.live = w.live[:0]
		for id := range w.rows {
			w.live = append(w.live, id)
		}
		w.log = append(w.log, batch...)
		w.ops += len(batch)
		w.mu.Unlock()
	}
}

// waitCaughtUp waits until the slot has confirmed everything written so far.
func (e *env) waitCaughtUp(timeout time.Duration) {
	e.t.Helper()
	var target string
	if err := e.pg.Pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&target); err != nil {
		e.t.Fatal(err)
	}
	testenv.WaitFor(e.t, "slot "+e.cfg.Slot+" confirmed past "+target, timeout, func() (bool, error) {
		var ok bool
		err := e.pg.Pool.QueryRow(context.Background(),
			"SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1", e.cfg.Slot, target).Scan(&ok)
		return ok, err
	})
}

// verifyLog checks that every logged change with minLSN > after is in recs;
// it returns the number of duplicate events seen.
func verifyLog(t *testing.T, recs []rawRecord, log []change, after uint64) (dups int) {
	t.Helper()
	type ev struct {
		id, n int
		del   bool
	}
	seen := map[ev]int{}
	for _, r := range recs {
		if r.Value == nil || r.Key == string(wire.TruncateKey) {
			continue
		}
		var row struct{ ID, N int }
		img := r.Value.After
		if r.Value.Op == wire.OpDelete {
			img = r.Value.Before
		}
		if err := json.Unmarshal(img, &row); err != nil {
			t.Fatalf("bad image %s: %v", r.Raw, err)
		}
		e := ev{row.ID, row.N, r.Value.Op == wire.OpDelete}
		if e.del {
			e.n = 0
		}
		seen[e]++
	}
	var missing []string
	for _, c := range log {
		if c.minLSN <= after {
			continue
		}
		e := ev{c.id, c.n, c.deleted}
		if c.deleted {
			e.n = 0
		}
		if seen[e] == 0 {
			missing = append(missing, fmt.Sprintf("%+v", c))
		}
	}
	for _, n := range seen {
		if n > 1 {
			dups += n - 1
		}
	}
	if len(missing) > 0 {
		if len(missing) > 20 {
			missing = append(missing[:20], fmt.Sprintf("… %d more", len(missing)-20))
		}
		t.Fatalf("%d committed changes missing from Kafka:\n%s", len(missing), strings.Join(missing, "\n"))
	}
	return dups
}

// TestKillNineNoLoss: kill -9 the streamer at random moments during a
// workload; after restarts every committed change is in Kafka
// (PRODUCT.md §6.1). Duplicates are allowed and reported.
func TestKillNineNoLoss(t *testing.T) {
	total := 50000
	e := newEnv(t, `CREATE TABLE w (id int PRIMARY KEY, n int NOT NULL)`)
	w := newWorkload(0)
	c := e.startChild("streamer-0")
	e.waitSnapshotMarker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, t, e.pg, total) }()
	rng := rand.New(rand.NewPCG(3, 4))
	kills := 0
	for kills < 5 {
		select {
		case <-done:
		case <-time.After(time.Duration(300+rng.IntN(1500)) * time.Millisecond):
		}
		c.Kill()
		kills++
		t.Logf("kill -9 #%d after %d changes", kills, w.ops)
		c = e.startChild(fmt.Sprintf("streamer-%d", kills))
	}
	<-done
	e.waitCaughtUp(2 * time.Minute)
	recs := e.readTopic(wire.RawTopic(e.k.Prefix, "public", "w"))
	dups := verifyLog(t, recs, w.log, 0)
	t.Logf("changes=%d kills=%d events=%d duplicates=%d", len(w.log), kills, len(recs), dups)
	sameState(t, lastPerKey(recs), e.tableState("w", `jsonb_build_object('id', id)::text`))
	c.Term(60 * time.Second)
}

// TestSnapshotWithConcurrentWrites: writes run while the initial snapshot
// reads; afterwards the last record per key equals the table and every
// change committed after the consistent point is present (PRODUCT.md §2).
func TestSnapshotWithConcurrentWrites(t *testing.T) {
	rows := 100000
	if heavy() {
		rows = 1000000
	}
	e := newEnv(t, fmt.Sprintf(`CREATE TABLE w (id int PRIMARY KEY, n int NOT NULL);
		INSERT INTO w SELECT g, 0 FROM generate_series(1, %d) g;`, rows))
	w := newWorkload(rows)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, t, e.pg, 1<<30) }()
	time.Sleep(300 * time.Millisecond)
	e.start()
	cp := e.waitSnapshotMarker()
	time.Sleep(2 * time.Second)
	cancel()
	<-done
	e.waitCaughtUp(2 * time.Minute)
	recs := e.readTopic(wire.RawTopic(e.k.Prefix, "public", "w"))
	afterCP := 0
	for _, c := range w.log {
		if c.minLSN > cp {
			afterCP++
		}
	}
	if afterCP == 0 {
		t.Fatalf("no change committed after the consistent point %s: the test proves nothing", wire.FormatLSN(cp))
	}
	dups := verifyLog(t, recs, w.log, cp)
	sameState(t, lastPerKey(recs), e.tableState("w", `jsonb_build_object('id', id)::text`))
	t.Logf("snapshot rows=%d concurrent changes=%d (after consistent point: %d) duplicates=%d", rows, len(w.log), afterCP, dups)
}

// waitSnapshotMarker waits for the "done" snapshot marker and returns the
// slot's consistent point.
func (e *env) waitSnapshotMarker() uint64 {
	e.t.Helper()
	var cp uint64
	topic := wire.StateTopic(e.cfg.TopicPrefix)
	testenv.WaitFor(e.t, "snapshot marker in "+topic, 3*time.Minute, func() (bool, error) {
		if !e.topicExists(topic) {
			return false, nil
		}
		for _, r := range e.readStateTopic(topic) {
			var m wire.SnapshotMarker
			if json.Unmarshal(r, &m) == nil && m.Done {
				v, err := wire.ParseLSN(m.ConsistentLSN)
				cp = v
				return err == nil, err
			}
		}
		return false, nil
	})
	return cp
}

func (e *env) readStateTopic(topic string) [][]byte {
	var out [][]byte
	for _, r := range e.readTopicRaw(topic) {
		out = append(out, r)
	}
	return out
}

// TestIdleSlotAdvances: with the streamed database idle and another database
// writing WAL, confirmed_flush_lsn keeps advancing (keepalives alone: the
// heartbeat is disabled here).
func TestIdleSlotAdvances(t *testing.T) {
	dur := 15 * time.Second
	if heavy() {
		dur = time.Minute
	}
	e := newEnv(t, `CREATE TABLE quiet (id int PRIMARY KEY)`)
	e.cfg.HeartbeatInterval = -1
	e.start()
	e.waitSnapshotMarker()
	other := testenv.Postgres(t)
	other.Exec(t, `CREATE TABLE noise (id serial PRIMARY KEY, pad text)`)
	slotLSN := func() uint64 {
		var s string
		if err := e.pg.Pool.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", e.cfg.Slot).Scan(&s); err != nil {
			t.Fatal(err)
		}
		v, _ := wire.ParseLSN(s)
		return v
	}
	start := slotLSN()
	advances, last := 0, start
	deadline := time.Now().Add(dur)
	for time.Now().Before(deadline) {
		other.Exec(t, `INSERT INTO noise (pad) SELECT repeat('x', 100) FROM generate_series(1, 200)`)
		time.Sleep(250 * time.Millisecond)
		if v := slotLSN(); v > last {
			advances++
			last = v
		}
	}
	if advances < 3 {
		t.Fatalf("confirmed_flush_lsn advanced %d times (from %s to %s) in %s while another database wrote WAL; want steady advance",
			advances, wire.FormatLSN(start), wire.FormatLSN(last), dur)
	}
	t.Logf("confirmed_flush_lsn advanced %d times, %d bytes, in %s", advances, last-start, dur)
}

// TestTakeover: two streamers on one slot; kill -9 the active one while
// rows are committed, one transaction after another, and the standby
// resumes within 15 s with nothing lost (PRODUCT.md §9): every row
// committed before, during and after the kill is in the raw topic.
func TestTakeover(t *testing.T) {
	e := newEnv(t, `CREATE TABLE w (id int PRIMARY KEY, n int NOT NULL)`)
	a := e.startChild("a")
	e.waitSnapshotMarker()
	b := e.startChild("b")
	topic := wire.RawTopic(e.k.Prefix, "public", "w")
	insert := func(from, to int) {
		for id := from; id <= to; id++ {
			e.pg.Exec(t, fmt.Sprintf(`INSERT INTO w VALUES (%d, 0)`, id))
		}
	}
	insert(1, 200)
	e.waitRecords(topic, 1)
	go func() { time.Sleep(20 * time.Millisecond); a.Kill() }() // while the next rows commit
	insert(201, 400)
	killed := time.Now()
	testenv.WaitFor(t, "the standby streamer to deliver every row", 15*time.Second, func() (bool, error) {
		return len(lastPerKey(e.readTopic(topic))) >= 400, nil
	})
	t.Logf("standby took over and delivered in %s", time.Since(killed).Round(10*time.Millisecond))
	sameState(t, lastPerKey(e.readTopic(topic)), e.tableState("w", `jsonb_build_object('id', id)::text`))
	b.Term(60 * time.Second)
}

// TestLargeTransactionBoundedMemory: one transaction of many rows streams
// with bounded memory: the streamer process's peak RSS grows, from before
// the transaction, by less than half the transaction's raw events (so
// buffering the transaction would fail the test, at the size make test
// runs too), and stays under 300 MB; a rolled-back large transaction
// emits nothing.
func TestLargeTransactionBoundedMemory(t *testing.T) {
	rows := 400000 // about 300 MB of raw events
	if heavy() {
		rows = 2000000
	}
	e := newEnv(t, `CREATE TABLE big (id int PRIMARY KEY, a text, b int)`)
	c := e.startChild("big")
	e.waitSnapshotMarker()
	before, err := testenv.RSS(c.Pid())
	if err != nil {
		t.Fatal(err)
	}
	e.pg.Exec(t, `BEGIN; INSERT INTO big SELECT g, 'rolled back', 0 FROM generate_series(1, 100000) g; ROLLBACK`)
	e.pg.Exec(t, fmt.Sprintf(`INSERT INTO big SELECT g, repeat(md5(g::text), 16), g FROM generate_series(1, %d) g`, rows))
	e.waitCaughtUp(10 * time.Minute)
	peak := peakRSS(t, c.Pid())
	n, rolledBack, bytes := 0, 0, 0
	e.scan(wire.RawTopic(e.k.Prefix, "public", "big"), false, 10*time.Minute, func(r rawRecord) {
		n++
		bytes += len(r.Raw)
		if strings.Contains(string(r.Raw), "rolled back") {
			rolledBack++
		}
	})
	if rolledBack > 0 {
		t.Fatalf("%d rows of the rolled-back transaction were emitted", rolledBack)
	}
	if n != rows {
		t.Fatalf("records = %d, want %d", n, rows)
	}
	t.Logf("one transaction of %d rows (%d MB of raw events): RSS %d MB before, peak %d MB", rows, bytes>>20, before>>20, peak>>20)
	if grew := peak - before; grew > int64(bytes)/2 {
		t.Errorf("peak RSS grew by %d MB, more than half the transaction's %d MB of raw events: is it buffered whole?", grew>>20, bytes>>20)
	}
	if peak > 300<<20 {
		t.Fatalf("peak RSS %d MB, want < 300 MB", peak>>20)
	}
	c.Term(60 * time.Second)
}

// TestSnapshotRedoneAfterKillTombstonesDeletedRows: kill -9 mid-snapshot,
// delete rows the first attempt had written, restart. The slot is dropped
// and the snapshot redone; the deleted rows are not in the new image, and
// their records from the first attempt must not stay in the compacted
// raw topic: after the redo, the last record of every key is the table's
// row, and the deleted keys end in a tombstone.
func TestSnapshotRedoneAfterKillTombstonesDeletedRows(t *testing.T) {
	// w is snapshotted first (tables go in name order), then z, large
	// enough that the kill lands while z is read.
	e := newEnv(t, `CREATE TABLE w (id int PRIMARY KEY, n int NOT NULL);
		INSERT INTO w SELECT g, 0 FROM generate_series(1, 50000) g;
		CREATE TABLE z (id int PRIMARY KEY);
		INSERT INTO z SELECT generate_series(1, 2000000);`)
	topic := wire.RawTopic(e.k.Prefix, "public", "w")
	c := e.startChild("streamer-1")
	testenv.WaitEvery(t, "the first snapshot attempt to be done with w and reading z", 2*time.Minute, 20*time.Millisecond, func() (bool, error) {
		return strings.Contains(c.Output(), "table=public.w rows=50000"), nil
	})
	c.Kill()
	for _, r := range e.readStateTopic(wire.StateTopic(e.cfg.TopicPrefix)) {
		var m wire.SnapshotMarker
		if json.Unmarshal(r, &m) == nil && m.Done {
			t.Fatal("the snapshot completed before the kill: the test proves nothing (make the table larger)")
		}
	}
	e.pg.Exec(t, `DELETE FROM w WHERE id <= 20000`)
	first := lastPerKey(e.readTopic(topic))
	deletedWritten := 0
	for id := 1; id <= 20000; id++ {
		if _, ok := first[fmt.Sprintf(`{"id":%d}`, id)]; ok {
			deletedWritten++
		}
	}
	if deletedWritten == 0 {
		t.Fatal("the first attempt wrote none of the rows deleted after it: the test proves nothing")
	}

	e.startChild("streamer-2")
	e.waitSnapshotMarker()
	e.waitCaughtUp(2 * time.Minute)
	sameState(t, lastPerKey(e.readTopic(topic)), e.tableState("w", `jsonb_build_object('id', id)::text`))
	t.Logf("first attempt wrote %d rows before kill -9, %d of them deleted before the redo", len(first), deletedWritten)
}
