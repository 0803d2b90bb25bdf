package streamer

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// tableWorkload writes random inserts, updates and deletes to the table
// "b" (id int primary key, v text, n int) until stop is called, which
// returns the number of operations.
func tableWorkload(t *testing.T, e *env, ids int) (stop func() int64) {
	ctx, cancel := context.WithCancel(context.Background())
	var ops atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 18))
			for ctx.Err() == nil {
				id := 1 + rng.IntN(ids)
				var err error
				switch rng.IntN(5) {
				case 0:
					_, err = e.pg.Pool.Exec(ctx, `DELETE FROM b WHERE id = $1`, id)
				case 1:
					// a transaction touching several keys, some in the same chunk
					_, err = e.pg.Pool.Exec(ctx, `UPDATE b SET n = n + 1, v = v || 'x' WHERE id BETWEEN $1 AND $1 + 3`, id)
				default:
					_, err = e.pg.Pool.Exec(ctx, `INSERT INTO b VALUES ($1, $2, 0) ON CONFLICT (id) DO UPDATE SET v = excluded.v, n = b.n + 1`, id, fmt.Sprintf("v%d", rng.IntN(1e6)))
				}
				if err != nil && ctx.Err() == nil {
					t.Errorf("workload: %v", err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	return func() int64 { cancel(); wg.Wait(); return ops.Load() }
}

// waitTableSnapshot waits until the state topic says the table's online
// snapshot is done, and returns that state.
func (e *env) waitTableSnapshot(table string, timeout time.Duration) wire.TableSnapshot {
	e.t.Helper()
	var ts wire.TableSnapshot
	key := wire.TableSnapshotKey(e.cfg.Slot, table)
	testenv.WaitFor(e.t, "the online snapshot of "+table+" to be done", timeout, func() (bool, error) {
		topic := wire.StateTopic(e.cfg.TopicPrefix)
		if !e.topicExists(topic) {
			return false, fmt.Errorf("no state topic yet")
		}
		found := false
		for _, r := range e.fetch(topic, false) {
			if r.Key == key && r.Raw != nil {
				found = json.Unmarshal(r.Raw, &ts) == nil
			}
		}
		if found && ts.Error != "" {
			e.t.Fatalf("online snapshot of %s refused: %s", table, ts.Error)
		}
		return found && ts.Done, fmt.Errorf("state %+v (found %v)", ts, found)
	})
	return ts
}

// waitTopicEqualsTable waits until the last record per key of b's raw
// topic equals the table.
func (e *env) waitTopicEqualsTable(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	topic := wire.RawTopic(e.cfg.TopicPrefix, "public", "b")
	var got map[string]json.RawMessage
	testenv.WaitFor(t, "b's raw topic to equal the table", 90*time.Second, func() (bool, error) {
		got = lastPerKey(e.readTopic(topic))
		want := e.tableState("b", "json_build_object('id', id)::text")
		for k, w := range want {
			if g, ok := got[k]; !ok || !jsonEqual(g, w) {
				return false, fmt.Errorf("key %s: topic %s, table %s", k, g, w)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				return false, fmt.Errorf("key %s in topic but not in table", k)
			}
		}
		return true, nil
	})
	return got
}

// TestOnlineSnapshotOfNewTable (issue 18): a table the config names but
// the publication lacks is added to it and snapshotted in chunks of 25
// rows while two writers insert, update and delete its rows (and a
// published table keeps streaming); afterwards the raw topic's last record
// per key equals the table, and the snapshot's rows carry their chunk's
// high watermark as commit LSN and the snapshot's start as LSN.
func TestOnlineSnapshotOfNewTable(t *testing.T) {
	e := newEnv(t, `
CREATE TABLE a (id int PRIMARY KEY, v text);
CREATE TABLE b (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL);
INSERT INTO b SELECT g, 'start ' || g, 0 FROM generate_series(1, 2000) g;
CREATE PUBLICATION decant FOR TABLE a;`)
	// A first streamer publishes a alone and creates the slot.
	e.cfg.Tables = []string{"public.a"}
	e.start()
	e.pg.Exec(t, `INSERT INTO a VALUES (1, 'streams')`)
	e.waitRecords(wire.RawTopic(e.cfg.TopicPrefix, "public", "a"), 1)
	e.stop()
	// The writes start; then the mappings use b too.
	stop := tableWorkload(t, e, 2400)
	time.Sleep(300 * time.Millisecond)
	e.cfg.Tables = []string{"public.a", "public.b"}
	e.cfg.SnapshotChunkRows = 25
	e.cfg.TablePoll = 200 * time.Millisecond
	// Widen each chunk's window, so that writes land between its read and
	// its high watermark: the rows they change must be dropped.
	afterChunkRead = func() { time.Sleep(20 * time.Millisecond) }
	defer func() { afterChunkRead = nil }()
	e.start()
	ts := e.waitTableSnapshot("public.b", 3*time.Minute)
	e.pg.Exec(t, `INSERT INTO a VALUES (2, 'still streams')`)
	ops := stop()
	e.waitTopicEqualsTable(t)
	recs := e.readTopic(wire.RawTopic(e.cfg.TopicPrefix, "public", "b"))
	checkSnapshotRowsFresh(t, recs)
	reads, changes, commits := 0, 0, map[string]bool{}
	for _, r := range recs {
		switch {
		case r.Value == nil:
		case r.Value.Op == wire.OpRead:
			reads++
			commits[r.Value.Source.CommitLSN] = true
			if r.Value.Source.LSN != ts.ID || !r.Value.Source.Snapshot {
				t.Fatalf("snapshot row %s: source %+v, want lsn %s (the snapshot's start) and snapshot true", r.Key, r.Value.Source, ts.ID)
			}
		default:
			changes++
		}
	}
	if reads == 0 || len(commits) < 10 || changes == 0 {
		t.Fatalf("b's topic: %d snapshot rows in %d chunks, %d changes: want rows of many chunks and streamed changes", reads, len(commits), changes)
	}
	e.waitRecords(wire.RawTopic(e.cfg.TopicPrefix, "public", "a"), 2)
	t.Logf("%d operations during the snapshot; %d snapshot rows in %d chunks, %d changes; the topic equals the table", ops, reads, len(commits), changes)
}

// TestOnlineSnapshotResumesAfterKill (issue 18): the streamer is killed
// with -9 in the middle of a table's online snapshot, under writes; the
// next one resumes after the last chunk written (the state topic's
// last_key) and the raw topic's last record per key equals the table.
func TestOnlineSnapshotResumesAfterKill(t *testing.T) {
	e := newEnv(t, `
CREATE TABLE a (id int PRIMARY KEY, v text);
CREATE TABLE b (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL);
INSERT INTO b SELECT g, 'start ' || g, 0 FROM generate_series(1, 3000) g;
CREATE PUBLICATION decant FOR TABLE a;`)
	// The child streams with its own config (runChild); b is requested
	// as `decant snapshot` does.
	e.cfg.SnapshotChunkRows = 10
	child := e.startChild("stream-1")
	testenv.WaitFor(t, "the child's state topic", 60*time.Second, func() (bool, error) {
		return e.topicExists(wire.StateTopic(e.cfg.TopicPrefix)), nil
	})
	e.requestSnapshot(t, "public.b")
	stop := tableWorkload(t, e, 3500)
	var mid wire.TableSnapshot
	testenv.WaitFor(t, "the snapshot to be part done", 2*time.Minute, func() (bool, error) {
		mid = e.tableSnapshotState("public.b")
		return mid.Rows > 300 && !mid.Done, fmt.Errorf("state %+v", mid)
	})
	child.Kill()
	child = e.startChild("stream-2")
	ts := e.waitTableSnapshot("public.b", 3*time.Minute)
	ops := stop()
	e.waitTopicEqualsTable(t)
	checkSnapshotRowsFresh(t, e.readTopic(wire.RawTopic(e.cfg.TopicPrefix, "public", "b")))
	if ts.ID != mid.ID {
		t.Fatalf("the snapshot restarted (id %s, was %s) instead of resuming", ts.ID, mid.ID)
	}
	if child.Exited() {
		t.Fatalf("second streamer exited:\n%s", child.Output())
	}
	t.Logf("killed at %d rows (last key %s); resumed to %d rows; %d operations; the topic equals the table", mid.Rows, mid.LastKey, ts.Rows, ops)
}

// requestSnapshot writes a request for an online snapshot of table.
func (e *env) requestSnapshot(t *testing.T, table string) {
	t.Helper()
	cl := e.k.Client
	if err := RequestTableSnapshot(context.Background(), cl, e.cfg.TopicPrefix,
		wire.TableSnapshot{Slot: e.cfg.Slot, Table: table, Time: time.Now().UTC().Format(time.RFC3339Nano)}); err != nil {
		t.Fatal(err)
	}
}

// tableSnapshotState is the latest state of table's online snapshot.
func (e *env) tableSnapshotState(table string) wire.TableSnapshot {
	var ts wire.TableSnapshot
	key := wire.TableSnapshotKey(e.cfg.Slot, table)
	for _, r := range e.fetch(wire.StateTopic(e.cfg.TopicPrefix), false) {
		if r.Key == key && r.Raw != nil {
			_ = json.Unmarshal(r.Raw, &ts)
		}
	}
	return ts
}

// checkSnapshotRowsFresh reads a raw topic in order and fails on a
// snapshot row that is older than the change of its key before it: one
// after a delete, or one that differs from the last change's row. (Keys
// with no change before their snapshot row cannot be checked this way;
// the final comparison with the table covers them.)
func checkSnapshotRowsFresh(t *testing.T, recs []rawRecord) {
	t.Helper()
	type state struct {
		deleted bool
		after   json.RawMessage
	}
	last := map[string]state{}
	var stale []string
	for _, r := range recs {
		switch {
		case r.Value == nil:
			last[r.Key] = state{deleted: true}
		case r.Value.Op == wire.OpDelete:
			last[r.Key] = state{deleted: true}
		case r.Value.Op == wire.OpRead:
			if p, ok := last[r.Key]; ok && (p.deleted || !jsonEqual(p.after, r.Value.After)) {
				stale = append(stale, fmt.Sprintf("%s: snapshot row %s after %+v", r.Key, r.Value.After, p))
			}
			last[r.Key] = state{after: r.Value.After}
		default:
			last[r.Key] = state{after: r.Value.After}
		}
	}
	if len(stale) > 0 {
		t.Fatalf("%d stale snapshot rows overwrite a newer change, e.g. %v", len(stale), stale[:min(5, len(stale))])
	}
}
