package streamer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// TestKillNineDuringStreamedTransaction: kill -9 the streamer while
// PostgreSQL streams large transactions before they commit (protocol 2) and
// decant spools them, which DESIGN.md says loses nothing because the spool
// needs no durability: PostgreSQL re-sends in-progress transactions from
// their start after a restart.
//
// Large transaction B crosses three kills: two while it streams, with part
// of it (and of its rolled-back savepoints) in the streamer's spool, and one
// after its commit, while its records are produced and before the slot
// confirmed it. Large transaction L is in progress at that third kill; it
// streams again, from its start, into the spool of the next streamer, which
// is killed the moment the slot confirms L's commit: all of L must be in
// Kafka by then. A large transaction aborted after a kill, and small
// transactions before, between and after, complete the picture. At the end
// every committed change is in Kafka, with the commit LSN and xid of its
// transaction; nothing of a rolled-back savepoint or aborted transaction is;
// the last record per key equals the table. Duplicates (at-least-once) are
// counted.
//
// The children get their config from the env spec, DSN included: the
// spools seen in their /proc/<pid>/fd show the DSN option that makes
// PostgreSQL stream reached their replication connection.
func TestKillNineDuringStreamedTransaction(t *testing.T) {
	scale := 1
	if heavy() {
		scale = 5
	}
	// Ids of B, by statement:
	//   [1, q]            inserted
	//   (q, q+r]          inserted in savepoint a, rolled back (before kill 1)
	//   (q+r, 3q+r]       inserted
	//   (3q+r, 4q+r]      inserted after kill 1
	//   (4q+r, 4q+2r]     inserted in savepoint c, rolled back (before kill 2)
	// and n = 1 for ids ≤ 3q+r divisible by 7 (savepoint b, released), n = 2
	// for ids ≤ 1000 in savepoint c (rolled back), ids ≤ 100 deleted.
	// Ids of L, from lateBase: (0, h] inserted before kill 3, (h, 2h] after,
	// (2h, 2h+r] inserted in savepoint d, rolled back, and last n = 5 for ids
	// divisible by 10.
	q, r := 50000*scale, 10000*scale
	wait := time.Duration(scale) * time.Minute
	h := q / 2
	const lateBase, abortedBase, smallBase = 5_000_000, 10_000_000, 20_000_000
	inB := func(id int) bool { return id >= 1 && id <= 4*q+2*r }
	keptInB := func(id int) bool { return inB(id) && id <= 4*q+r && (id <= q || id > q+r) }
	inL := func(id int) bool { return id > lateBase && id <= lateBase+2*h+r }
	rolledBack := func(id int) bool {
		return (id > q && id <= q+r) || (id > 4*q+r && id <= 4*q+2*r) || (id > lateBase+2*h && id <= lateBase+2*h+r) ||
			(id > abortedBase && id < smallBase) // A
	}

	e := newEnv(t, `CREATE TABLE k (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)`)
	// PostgreSQL streams a transaction in progress once it holds more than
	// logical_decoding_work_mem of it; the server default (64MB) would not
	// stream these. The children get the DSN, option included, in their
	// spec; the spools seen in them below show the option took effect.
	sep := "?"
	if strings.Contains(e.cfg.DSN, "?") {
		sep = "&"
	}
	e.cfg.DSN += sep + "options=-c%20logical_decoding_work_mem%3D64kB"
	topic := wire.RawTopic(e.k.Prefix, "public", "k")
	ctx := context.Background()
	started := time.Now()

	children := 0
	c := e.startChild("streamer-0")
	e.waitSnapshotMarker()

	small := 0
	smallTxn := func(when string) {
		t.Helper()
		id := smallBase + small
		small++
		e.pg.Exec(t, fmt.Sprintf(`INSERT INTO k VALUES (%d, 'small %s', 0), (%d, 'small %s', 0)`, id, when, id+1000, when))
		e.pg.Exec(t, fmt.Sprintf(`UPDATE k SET n = n + 1 WHERE id = %d`, id))
	}
	type largeTxn struct {
		name   string
		exec   func(sql string)
		xid    uint32
		commit uint64 // from its records
		first  uint64 // LSN of its first change, from its records
	}
	begin := func(name string) *largeTxn {
		t.Helper()
		conn, err := e.pg.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Release)
		x := &largeTxn{name: name, exec: func(sql string) {
			t.Helper()
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %s: %v", name, sql, err)
			}
		}}
		x.exec(`BEGIN`)
		if err := conn.QueryRow(ctx, `SELECT (txid_current() % 4294967296)::int8`).Scan(&x.xid); err != nil {
			t.Fatal(err)
		}
		return x
	}
	ins := func(from, to int, v string) string {
		return fmt.Sprintf(`INSERT INTO k SELECT g, '%s ' || md5(g::text), 0 FROM generate_series(%d, %d) g`, v, from, to)
	}
	// waitSpooled waits until the child holds at least min bytes of
	// transaction xid, streamed in progress, in its spool. With drainedTo (an
	// LSN) it also waits until the walsender has sent everything before it
	// and the spool has stopped growing: the child has read every message
	// of the transaction so far, subtransaction aborts included.
	waitSpooled := func(xid uint32, min int64, drainedTo string) int64 {
		t.Helper()
		pid := c.Pid()
		var size, prev int64
		var steady time.Time
		testenv.WaitFor(t, fmt.Sprintf("streamer %d to spool ≥ %d bytes of transaction %d streamed in progress (drained to %q)", children, min, xid, drainedTo), wait, func() (bool, error) {
			var err error
			if size, err = spooledBytes(pid, xid); err != nil || size < min {
				return false, err
			}
			if drainedTo == "" {
				return true, nil
			}
			if size != prev {
				prev, steady = size, time.Now()
				return false, nil
			}
			var sent bool
			if err := e.pg.Pool.QueryRow(ctx, `SELECT coalesce(bool_or(r.sent_lsn >= $2::pg_lsn), false) FROM pg_replication_slots s
				JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1`, e.cfg.Slot, drainedTo).Scan(&sent); err != nil {
				return false, err
			}
			return sent && time.Since(steady) >= 500*time.Millisecond, fmt.Errorf("spool %d bytes, walsender sent up to %s: %v", size, drainedTo, sent)
		})
		return size
	}
	restart := func(why string) {
		t.Helper()
		c.Kill()
		children++
		t.Logf("kill -9 #%d at %s: %s", children, time.Since(started).Round(time.Millisecond), why)
		c = e.startChild(fmt.Sprintf("streamer-%d", children))
	}
	// insertLSN is the WAL insert position: taken just before a commit,
	// the slot passes it with the commit (or with a record written between
	// the two).
	insertLSN := func() uint64 {
		t.Helper()
		var text string
		if err := e.pg.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&text); err != nil {
			t.Fatal(err)
		}
		lsn, err := wire.ParseLSN(text)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	confirmedPast := func(lsn uint64, what string) {
		t.Helper()
		for deadline := time.Now().Add(wait); e.slotConfirmed() <= lsn; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("slot did not confirm %s (past %s) within %s", what, wire.FormatLSN(lsn), wait)
			}
		}
	}
	walNow := func() string {
		t.Helper()
		var lsn string
		if err := e.pg.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		return lsn
	}

	smallTxn("before")
	b := begin("B")
	b.exec(ins(1, q, "big"))
	b.exec(`SAVEPOINT a`)
	b.exec(ins(q+1, q+r, "rolled back"))
	b.exec(`ROLLBACK TO a`)
	b.exec(ins(q+r+1, 2*q+r, "big"))
	smallTxn("during 1")
	b.exec(ins(2*q+r+1, 3*q+r, "big"))
	size := waitSpooled(b.xid, 1<<20, "")
	restart(fmt.Sprintf("B streaming, %d bytes of it spooled", size))

	b.exec(`SAVEPOINT b`)
	b.exec(fmt.Sprintf(`UPDATE k SET n = 1 WHERE id %% 7 = 0 AND id <= %d`, 3*q+r))
	b.exec(`RELEASE b`)
	a := begin("A")
	a.exec(ins(abortedBase+1, abortedBase+3*r, "aborted big"))
	b.exec(ins(3*q+r+1, 4*q+r, "big"))
	b.exec(`SAVEPOINT c`)
	b.exec(ins(4*q+r+1, 4*q+2*r, "rolled back"))
	b.exec(`UPDATE k SET n = 2 WHERE id <= 1000`)
	b.exec(`ROLLBACK TO c`)
	b.exec(`DELETE FROM k WHERE id <= 100`)
	smallTxn("during 2")
	size = waitSpooled(b.xid, 1<<20, walNow())
	restart(fmt.Sprintf("B and A streamed up to now, both savepoint rollbacks read; %d bytes of B spooled", size))
	a.exec(`ROLLBACK`)
	smallTxn("during 3")
	l := begin("L")
	l.exec(ins(lateBase+1, lateBase+h, "late"))

	// Kill 3: B committed, its records being produced, the slot not yet
	// confirmed past it; L in progress.
	endBefore := e.rawEndOffset(topic)
	bBefore := insertLSN()
	b.exec(`COMMIT`)
	committed := time.Now()
	var endAtKill int64
	testenv.WaitFor(t, "streamer to produce records of the committed transaction B", wait, func() (bool, error) {
		endAtKill = e.rawEndOffset(topic)
		return endAtKill >= endBefore+100, fmt.Errorf("%d records produced since B's commit, want ≥ 100", endAtKill-endBefore)
	})
	c.Kill()
	confirmedAtKill := e.slotConfirmed()
	children++
	t.Logf("kill -9 #%d at %s: B committed %s earlier, %d records produced since; slot confirmed %s; L in progress",
		children, time.Since(started).Round(time.Millisecond), time.Since(committed).Round(time.Millisecond), endAtKill-endBefore, wire.FormatLSN(confirmedAtKill))
	c = e.startChild(fmt.Sprintf("streamer-%d", children))

	l.exec(ins(lateBase+h+1, lateBase+2*h, "late"))
	l.exec(`SAVEPOINT d`)
	l.exec(ins(lateBase+2*h+1, lateBase+2*h+r, "rolled back"))
	l.exec(`ROLLBACK TO d`)
	l.exec(fmt.Sprintf(`UPDATE k SET n = 5 WHERE id BETWEEN %d AND %d AND id %% 10 = 0`, lateBase+1, lateBase+2*h))
	// B is in Kafka (so its records do not delay the confirmation of L's,
	// below), and the new streamer spools L: PostgreSQL re-sent it from its
	// start, in progress.
	confirmedPast(bBefore, "B's commit")
	size = waitSpooled(l.xid, 1<<20, "")
	// Kill 4: the moment the slot confirms L's commit, every record of L
	// must be in Kafka already.
	lBefore := insertLSN()
	l.exec(`COMMIT`)
	committed = time.Now()
	confirmedPast(lBefore, "L's commit")
	restart(fmt.Sprintf("the slot confirmed L's commit %s after it", time.Since(committed).Round(time.Millisecond)))
	e.pg.Exec(t, `UPDATE k SET n = 99 WHERE id = 150`)
	smallTxn("after")
	e.waitCaughtUp(3 * wait)
	caughtUp := time.Since(started)
	t.Logf("L was streamed again into the spool of the streamer after kill #3 (%d bytes before its commit); caught up at %s", size, caughtUp.Round(time.Millisecond))

	var streamTxns, streamCount, spillTxns, spillBytes int64
	if err := e.pg.Pool.QueryRow(ctx, `SELECT stream_txns, stream_count, spill_txns, spill_bytes FROM pg_stat_replication_slots WHERE slot_name = $1`,
		e.cfg.Slot).Scan(&streamTxns, &streamCount, &spillTxns, &spillBytes); err != nil {
		t.Logf("pg_stat_replication_slots: %v", err)
	}

	recs := e.readTopic(topic)
	// An event is one record: op, row id and n (0 for deletes); opTomb
	// stands for a tombstone.
	const opTomb = wire.Op("tombstone")
	type event struct {
		op    wire.Op
		id, n int
	}
	type state struct {
		v    string
		n    int
		tomb bool
	}
	seen := map[event]int{}
	last := map[int]state{} // the last record per key
	// of checks a record of a large transaction: its xid, one commit LSN.
	of := func(x *largeTxn, xid uint32, commitText, lsnText string, rec rawRecord) {
		t.Helper()
		commit, err := wire.ParseLSN(commitText)
		if err != nil {
			t.Fatalf("commit LSN %q: %v: %s", commitText, err, rec.Raw)
		}
		if x.commit == 0 {
			x.commit = commit
		}
		if lsn, err := wire.ParseLSN(lsnText); err == nil && (x.first == 0 || lsn < x.first) {
			x.first = lsn
		}
		if commit != x.commit || (xid != 0 && xid != x.xid) {
			t.Fatalf("record of transaction %s with xid %d commit %s, want xid %d commit %s: key %s value %s",
				x.name, xid, commitText, x.xid, wire.FormatLSN(x.commit), rec.Key, rec.Raw)
		}
	}
	for _, rec := range recs {
		if rec.Key == string(wire.TruncateKey) {
			t.Fatalf("unexpected truncate record: %s", rec.Raw)
		}
		var key struct{ ID int }
		if err := json.Unmarshal([]byte(rec.Key), &key); err != nil || key.ID == 0 {
			t.Fatalf("bad key %q: %v", rec.Key, err)
		}
		if rec.Value == nil {
			seen[event{opTomb, key.ID, 0}]++
			last[key.ID] = state{tomb: true}
			if !inB(key.ID) {
				t.Fatalf("tombstone of key %s: only B deletes", rec.Key)
			}
			of(b, 0, rec.Hdr["decant-lsn"], "", rec)
			continue
		}
		v := rec.Value
		img := v.After
		if v.Op == wire.OpDelete {
			img = v.Before
		}
		var row struct {
			ID int
			V  string
			N  int
		}
		if err := json.Unmarshal(img, &row); err != nil {
			t.Fatalf("bad image in %s: %v", rec.Raw, err)
		}
		if row.ID != key.ID {
			t.Fatalf("record with key %s of row %d: %s", rec.Key, row.ID, rec.Raw)
		}
		if strings.Contains(row.V, "rolled back") || strings.Contains(row.V, "aborted") || rolledBack(row.ID) || (v.Op == wire.OpUpdate && row.N == 2) {
			t.Fatalf("change of a rolled-back savepoint or aborted transaction emitted: %s", rec.Raw)
		}
		ev := event{v.Op, row.ID, row.N}
		if v.Op == wire.OpDelete {
			ev.n = 0
		}
		seen[ev]++
		last[row.ID] = state{v: row.V, n: row.N}
		switch {
		case row.ID >= smallBase || (row.ID == 150 && row.N == 99):
			if v.Source.XID == b.xid || v.Source.XID == l.xid {
				t.Fatalf("change of a small transaction with the xid of a large one: %s", rec.Raw)
			}
		case inB(row.ID):
			of(b, v.Source.XID, v.Source.CommitLSN, v.Source.LSN, rec)
		case inL(row.ID):
			of(l, v.Source.XID, v.Source.CommitLSN, v.Source.LSN, rec)
		default:
			t.Fatalf("record of an unexpected row: %s", rec.Raw)
		}
	}
	// Every committed change.
	var missing []string
	want := func(ev event) {
		if seen[ev] == 0 {
			missing = append(missing, fmt.Sprintf("%s id=%d n=%d", ev.op, ev.id, ev.n))
		}
	}
	changes := 0
	for id := 1; id <= 4*q+r; id++ {
		if !keptInB(id) {
			continue
		}
		want(event{wire.OpCreate, id, 0})
		changes++
		if id%7 == 0 && id <= 3*q+r {
			want(event{wire.OpUpdate, id, 1})
			changes++
		}
		if id <= 100 {
			want(event{wire.OpDelete, id, 0})
			want(event{opTomb, id, 0})
			changes++
		}
	}
	for id := lateBase + 1; id <= lateBase+2*h; id++ {
		want(event{wire.OpCreate, id, 0})
		changes++
		if id%10 == 0 {
			want(event{wire.OpUpdate, id, 5})
			changes++
		}
	}
	for i := 0; i < small; i++ {
		want(event{wire.OpCreate, smallBase + i, 0})
		want(event{wire.OpCreate, smallBase + i + 1000, 0})
		want(event{wire.OpUpdate, smallBase + i, 1})
		changes += 3
	}
	want(event{wire.OpUpdate, 150, 99})
	changes++
	if len(missing) > 0 {
		n := len(missing)
		if n > 20 {
			missing = append(missing[:20], fmt.Sprintf("… %d more", n-20))
		}
		t.Fatalf("%d committed changes missing from Kafka:\n%s", n, strings.Join(missing, "\n"))
	}
	if confirmedAtKill >= b.commit {
		t.Fatalf("the slot had confirmed %s, past B's commit %s, at kill #3: the kill missed the window between commit and confirmation",
			wire.FormatLSN(confirmedAtKill), wire.FormatLSN(b.commit))
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	// The last record per key equals the table; a deleted row's is a tombstone.
	rows, err := e.pg.Pool.Query(ctx, `SELECT id, v, n FROM k`)
	if err != nil {
		t.Fatal(err)
	}
	var mismatches []string
	tableRows := 0
	for rows.Next() {
		var id int
		var want state
		if err := rows.Scan(&id, &want.v, &want.n); err != nil {
			t.Fatal(err)
		}
		tableRows++
		if got, ok := last[id]; !ok {
			mismatches = append(mismatches, fmt.Sprintf("id %d (%+v) not in the topic", id, want))
		} else if got != want {
			mismatches = append(mismatches, fmt.Sprintf("id %d: topic %+v, table %+v", id, got, want))
		}
		delete(last, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, got := range last {
		if !got.tomb {
			mismatches = append(mismatches, fmt.Sprintf("id %d (%+v) in the topic but not in the table, and its last record is no tombstone", id, got))
		}
	}
	if n := len(mismatches); n > 0 {
		if n > 20 {
			mismatches = append(mismatches[:20], fmt.Sprintf("… %d more", n-20))
		}
		t.Fatalf("%d keys differ between the topic (last record per key) and the table:\n%s", n, strings.Join(mismatches, "\n"))
	}
	if confirmedAtKill > b.first {
		t.Logf("at kill #3 the slot had confirmed %s, inside B (first change %s, commit %s; small transactions committed meanwhile): B was re-sent whole all the same", wire.FormatLSN(confirmedAtKill), wire.FormatLSN(b.first), wire.FormatLSN(b.commit))
	}
	t.Logf("B xid %d commit %s, L xid %d commit %s: %d committed changes all present (%d rows in the table); kills=%d records=%d duplicates=%d; PostgreSQL streamed %d transactions in %d blocks, spilled %d (%d MB) to its disk",
		b.xid, wire.FormatLSN(b.commit), l.xid, wire.FormatLSN(l.commit), changes, tableRows, children, len(recs), dups, streamTxns, streamCount, spillTxns, spillBytes>>20)
	c.Term(60 * time.Second)
}

// spooledBytes is the size of the spool file (unlinked, see newSpool) of
// transaction xid that process pid holds open, 0 if none.
func spooledBytes(pid int, xid uint32) (int64, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var size int64
	for _, fd := range fds {
		target, err := os.Readlink(dir + "/" + fd.Name())
		if err != nil || !strings.Contains(target, fmt.Sprintf("/decant-txn-%d-", xid)) {
			continue
		}
		if fi, err := os.Stat(dir + "/" + fd.Name()); err == nil && fi.Size() > size {
			size = fi.Size()
		}
	}
	return size, nil
}

// rawEndOffset is the sum of topic's partition end offsets (0 before it exists).
func (e *env) rawEndOffset(topic string) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := e.k.Admin.ListEndOffsets(ctx, topic)
	if err != nil {
		e.t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	var sum int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			sum += o.Offset
		}
	})
	return sum
}

// slotConfirmed is the slot's confirmed_flush_lsn.
func (e *env) slotConfirmed() uint64 {
	e.t.Helper()
	var s string
	if err := e.pg.Pool.QueryRow(context.Background(), `SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1`, e.cfg.Slot).Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	v, err := wire.ParseLSN(s)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}
