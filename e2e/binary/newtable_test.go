package binary

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// reviewsSchema is a table no mapping uses at first, so the publication
// decant creates leaves it out.
const reviewsSchema = `
CREATE TABLE reviews (id int PRIMARY KEY, item_id int NOT NULL, stars int NOT NULL, body text NOT NULL);
CREATE INDEX ON reviews (item_id);
ALTER TABLE reviews REPLICA IDENTITY FULL;
INSERT INTO items SELECT g, 'item ' || g, 1 + g % 2 FROM generate_series(1, 200) g;
INSERT INTO reviews SELECT g, 1 + g % 200, g % 5, 'review ' || g FROM generate_series(1, 3000) g;
`

// withReviews is the items mapping with a one-to-many relation on reviews.
const withReviews = `version: 1
schema: public
aggregates:
  item:
    table: items
    columns: [id, name]
    relations:
      category:
        table: categories
        references: category_id
        columns: [title]
      reviews:
        table: reviews
        foreign_key: item_id
        columns: [id, stars, body]
    elasticsearch:
      index: %s
      settings: {number_of_shards: 1, number_of_replicas: 0}
`

// withReviewsOracle computes withReviews' documents by hand.
const withReviewsOracle = `
SELECT i.id::text, jsonb_build_object('id', i.id, 'name', i.name,
  'category', CASE WHEN c.id IS NULL THEN NULL ELSE jsonb_build_object('title', c.title) END,
  'reviews', coalesce((SELECT jsonb_agg(jsonb_build_object('id', r.id, 'stars', r.stars, 'body', r.body) ORDER BY r.id)
                       FROM reviews r WHERE r.item_id = i.id), '[]'::jsonb))
FROM items i LEFT JOIN categories c ON c.id = i.category_id`

// reviewsWorkload inserts, updates (moving reviews between items too) and
// deletes reviews, and renames items, until stop is called, which returns
// the number of operations.
func reviewsWorkload(t *testing.T, p *testenv.Pipeline) (stop func() int64) {
	ctx, cancel := context.WithCancel(context.Background())
	var ops atomic.Int64
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1818))
			for ctx.Err() == nil {
				id := 1 + rng.IntN(3500)
				var err error
				switch rng.IntN(6) {
				case 0:
					_, err = p.PG.Pool.Exec(ctx, `DELETE FROM reviews WHERE id = $1`, id)
				case 1:
					_, err = p.PG.Pool.Exec(ctx, `UPDATE reviews SET item_id = $2, stars = (stars + 1) % 5 WHERE id BETWEEN $1 AND $1 + 2`, id, 1+rng.IntN(200))
				case 2:
					_, err = p.PG.Pool.Exec(ctx, `UPDATE items SET name = name || '.' WHERE id = $1`, 1+rng.IntN(200))
				default:
					_, err = p.PG.Pool.Exec(ctx, `INSERT INTO reviews VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET body = excluded.body, stars = excluded.stars`,
						id, 1+rng.IntN(200), rng.IntN(5), fmt.Sprintf("b%d", rng.IntN(1e6)))
				}
				if err != nil && ctx.Err() == nil {
					t.Errorf("workload: %v", err)
					return
				}
				ops.Add(1)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return func() int64 { cancel(); wg.Wait(); return ops.Load() }
}

// topicRecords reads every record of topic now.
func topicRecords(t *testing.T, p *testenv.Pipeline, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := p.Kafka.Admin.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	got := map[int32]int64{}
	for {
		done := true
		for part, end := range want {
			done = done && got[part] >= end
		}
		if done {
			return out
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = r.Offset + 1
			if r.Offset < want[r.Partition] {
				out = append(out, r)
			}
		})
	}
}

// reviewsSnapshot is the latest state of the reviews table's online
// snapshot in the state topic.
func reviewsSnapshot(t *testing.T, p *testenv.Pipeline) (wire.TableSnapshot, bool) {
	return topicSnapshotState(t, p, "public.reviews")
}

// topicSnapshotState is the latest state of table's online snapshot in
// the state topic.
func topicSnapshotState(t *testing.T, p *testenv.Pipeline, table string) (wire.TableSnapshot, bool) {
	var ts wire.TableSnapshot
	found := false
	key := wire.TableSnapshotKey(p.Slot, table)
	for _, r := range topicRecords(t, p, wire.StateTopic(p.Kafka.Prefix)) {
		if string(r.Key) == key && r.Value != nil {
			found = json.Unmarshal(r.Value, &ts) == nil
		}
	}
	return ts, found
}

// rawEqualsTable compares the last record per key of reviews' raw topic
// with the table, and checks that no snapshot row there replaces a newer
// change of its key; it returns the problems.
func rawEqualsTable(t *testing.T, p *testenv.Pipeline) []string {
	t.Helper()
	last := map[string]json.RawMessage{}
	var problems []string
	for _, r := range topicRecords(t, p, wire.RawTopic(p.Kafka.Prefix, "public", "reviews")) {
		if r.Value == nil {
			delete(last, string(r.Key))
			continue
		}
		var ch wire.Change
		if err := json.Unmarshal(r.Value, &ch); err != nil {
			t.Fatalf("raw record %s: %v", r.Key, err)
		}
		if ch.Op == wire.OpDelete {
			delete(last, string(r.Key))
			continue
		}
		if prev, ok := last[string(r.Key)]; ok && ch.Op == wire.OpRead && testenv.Canonical(prev) != testenv.Canonical(ch.After) {
			problems = append(problems, fmt.Sprintf("stale snapshot row %s %s after %s", r.Key, ch.After, prev))
		}
		last[string(r.Key)] = ch.After
	}
	rows, err := p.PG.Pool.Query(context.Background(), `SELECT json_build_object('id', id)::text, to_jsonb(r) FROM reviews r`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var k string
		var v json.RawMessage
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		k = string(wire.AppendCompact(nil, []byte(k)))
		seen[k] = true
		if g, ok := last[k]; !ok {
			problems = append(problems, "missing from the raw topic: "+k)
		} else if testenv.Canonical(g) != testenv.Canonical(v) {
			problems = append(problems, fmt.Sprintf("%s: raw topic %s, table %s", k, g, v))
		}
	}
	for k := range last {
		if !seen[k] {
			problems = append(problems, "in the raw topic, not in the table: "+k)
		}
	}
	return problems
}

// TestRunSnapshotsNewTableOnline (issue 18, acceptance 2): a mapping gains
// a relation on a table outside the publication while writes hit that
// table. decant run adds the table to the publication and snapshots it
// online in chunks of 10 rows; it is killed with -9 in the middle of that
// snapshot and started again, which resumes it. Afterwards the raw
// topic's last record per key equals the table (and no snapshot row
// replaced a newer change), and the documents equal the oracle.
func TestRunSnapshotsNewTableOnline(t *testing.T) {
	p := newPipeline(t)
	p.PG.Exec(t, reviewsSchema)
	run := p.Start("run-1", nil, "run")
	p.WaitConverged(90 * time.Second)
	waitLog(t, run, `msg="initial load complete`, time.Minute)
	run.Term(60 * time.Second)

	p.Write("mappings/item.yaml", fmt.Sprintf(withReviews, p.Alias))
	p.Docs.OracleSQL = withReviewsOracle
	stop := reviewsWorkload(t, p)
	defer stop()
	chunkEnv := []string{"DECANT_STREAMER_SNAPSHOT_CHUNK_ROWS=10"}
	run = p.Start("run-2", chunkEnv, "run")
	var mid wire.TableSnapshot
	testenv.WaitFor(t, "the online snapshot of reviews to be part done", 2*time.Minute, func() (bool, error) {
		ts, ok := reviewsSnapshot(t, p)
		mid = ts
		return ok && ts.Rows >= 100 && !ts.Done, fmt.Errorf("state %+v (found %v)", ts, ok)
	})
	run.Kill()
	if !strings.Contains(run.Output(), "adding it and snapshotting it online") {
		t.Fatalf("run-2 did not say it adds reviews to the publication:\n%s", run.Tail(40))
	}
	// decant status shows the snapshot left unfinished.
	if out, _ := p.Decant("status"); !strings.Contains(out, "online snapshot of public.reviews: ") {
		t.Fatalf("decant status does not show the unfinished snapshot of public.reviews:\n%s", out)
	}
	run = p.Start("run-3", chunkEnv, "run")
	var done wire.TableSnapshot
	testenv.WaitFor(t, "the online snapshot of reviews to be done", 3*time.Minute, func() (bool, error) {
		ts, ok := reviewsSnapshot(t, p)
		done = ts
		if ts.Error != "" {
			t.Fatalf("online snapshot refused: %s", ts.Error)
		}
		return ok && ts.Done, fmt.Errorf("state %+v (found %v)", ts, ok)
	})
	time.Sleep(time.Second) // writes after the snapshot, too
	ops := stop()
	if done.ID != mid.ID {
		t.Fatalf("the snapshot started over (id %s, was %s) instead of resuming after the kill", done.ID, mid.ID)
	}
	testenv.WaitFor(t, "the reviews raw topic to equal the table", 2*time.Minute, func() (bool, error) {
		problems := rawEqualsTable(t, p)
		return len(problems) == 0, fmt.Errorf("%d problems, e.g. %v", len(problems), problems[:min(5, len(problems))])
	})
	p.WaitConverged(3 * time.Minute)
	t.Logf("%d operations; killed at %d snapshot rows (last key %s), resumed to %d rows; raw topic and documents equal the database",
		ops, mid.Rows, mid.LastKey, done.Rows)
	if code := run.Term(time.Minute); code != 0 {
		t.Fatalf("final SIGTERM: exit %d\n%s", code, run.Tail(40))
	}
}

// TestSnapshotCommandUnderWrites (issue 18): `decant snapshot
// public.items` while decant run runs and writes hit items: the command
// waits for the snapshot and reports it done; the raw topic's last record
// per key equals the table and the documents the oracle. A table without
// a primary key is refused before anything is written.
func TestSnapshotCommandUnderWrites(t *testing.T) {
	p := newPipeline(t)
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'item ' || g, 1 + g % 2 FROM generate_series(1, 2000) g;
CREATE TABLE nokey (v int);
CREATE TABLE outside (id int PRIMARY KEY)`)
	run := p.Start("run", []string{"DECANT_STREAMER_SNAPSHOT_CHUNK_ROWS=50"}, "run")
	p.WaitConverged(90 * time.Second)

	out, err := p.Decant("snapshot", "public.nokey")
	if err == nil || !strings.Contains(out, "has no primary key") {
		t.Fatalf("decant snapshot of a table without a primary key: %v, want a refusal naming it:\n%s", err, out)
	}
	refused, err := testenv.DecantCmd(t, []string{"DECANT_POSTGRES_CREATE_PUBLICATION=false"}, "snapshot", "public.outside", "--config", p.Config).CombinedOutput()
	if err == nil || !strings.Contains(string(refused), `ALTER PUBLICATION "decant" ADD TABLE "public"."outside";`) {
		t.Fatalf("decant snapshot of a table outside the publication with create_publication false: %v, want a refusal naming the ALTER PUBLICATION:\n%s", err, refused)
	}
	if ts, ok := topicSnapshotState(t, p, "public.outside"); ok {
		t.Fatalf("a refused decant snapshot wrote a request: %+v", ts)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var ops atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(18, 2))
		for ctx.Err() == nil {
			id := 1 + rng.IntN(2500)
			var err error
			switch rng.IntN(4) {
			case 0:
				_, err = p.PG.Pool.Exec(ctx, `DELETE FROM items WHERE id = $1`, id)
			default:
				_, err = p.PG.Pool.Exec(ctx, `INSERT INTO items VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET name = excluded.name, category_id = excluded.category_id`,
					id, fmt.Sprintf("n%d", rng.IntN(1e6)), 1+rng.IntN(2))
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("workload: %v", err)
				return
			}
			ops.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()
	started := time.Now()
	out, err = p.Decant("snapshot", "public.items", "--timeout", "3m")
	cancel()
	<-done
	if err != nil || !strings.Contains(out, "snapshot of public.items done") {
		t.Fatalf("decant snapshot public.items: %v\n%s\nrun:\n%s", err, out, run.Tail(30))
	}
	took := time.Since(started)
	topic := wire.RawTopic(p.Kafka.Prefix, "public", "items")
	testenv.WaitFor(t, "the items raw topic to equal the table", 2*time.Minute, func() (bool, error) {
		last := map[string]string{}
		stale := 0
		for _, r := range topicRecords(t, p, topic) {
			if r.Value == nil {
				delete(last, string(r.Key))
				continue
			}
			var ch wire.Change
			if err := json.Unmarshal(r.Value, &ch); err != nil {
				return false, err
			}
			if ch.Op == wire.OpDelete {
				delete(last, string(r.Key))
				continue
			}
			if prev, ok := last[string(r.Key)]; ok && ch.Op == wire.OpRead && prev != testenv.Canonical(ch.After) {
				stale++
			}
			last[string(r.Key)] = testenv.Canonical(ch.After)
		}
		if stale > 0 {
			t.Fatalf("%d snapshot rows replace a newer change of their key", stale)
		}
		want := map[string]string{}
		rows, err := p.PG.Pool.Query(context.Background(), `SELECT json_build_object('id', id)::text, to_jsonb(i) FROM items i`)
		if err != nil {
			return false, err
		}
		for rows.Next() {
			var k string
			var v json.RawMessage
			if err := rows.Scan(&k, &v); err != nil {
				rows.Close()
				return false, err
			}
			want[string(wire.AppendCompact(nil, []byte(k)))] = testenv.Canonical(v)
		}
		rows.Close()
		m := testenv.Mismatches(want, last)
		return len(m) == 0, fmt.Errorf("%d mismatches, e.g. %v", len(m), m[:min(5, len(m))])
	})
	p.WaitConverged(2 * time.Minute)
	t.Logf("decant snapshot public.items took %s under %d writes; raw topic and documents equal the database", took.Round(time.Millisecond), ops.Load())
	run.Term(time.Minute)
}
