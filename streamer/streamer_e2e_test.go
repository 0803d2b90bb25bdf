package streamer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// env is one streamer test: a database, a topic prefix, a running streamer.
type env struct {
	t      testing.TB
	pg     *testenv.PG
	k      *testenv.KafkaEnv
	cfg    Config
	cancel context.CancelFunc
	done   chan error
	s      *Streamer // the last one started
}

func newEnv(t testing.TB, setupSQL string) *env {
	pg := testenv.Postgres(t)
	k := testenv.Kafka(t)
	if setupSQL != "" {
		pg.Exec(t, setupSQL)
	}
	return &env{t: t, pg: pg, k: k, cfg: newEnvConfig(pg, k)}
}

// newEnvConfig is the streamer config of a test: publication "decant"
// (created FOR ALL TABLES unless the test created it), a fresh slot.
func newEnvConfig(pg *testenv.PG, k *testenv.KafkaEnv) Config {
	return Config{
		DSN: pg.DSN, Publication: "decant", CreatePublication: true, Slot: "s_" + testenv.Suffix(),
		TopicPrefix: k.Prefix, Partitions: 1, Kafka: []kgo.Opt{kgo.SeedBrokers(k.Brokers...)},
		StatusInterval: 200 * time.Millisecond, HeartbeatInterval: time.Second, TakeoverPoll: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// start runs a streamer until the test ends (or stop is called).
func (e *env) start() {
	s, err := New(e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.s = s
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- s.Run(ctx); s.Close() }()
	e.t.Cleanup(e.stop)
}

func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("streamer Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		e.t.Errorf("streamer did not stop within 60s")
	}
	e.cancel = nil
}

// rawRecord is a consumed raw record with its value decoded.
type rawRecord struct {
	Key   string
	Value *wire.Change // nil for a tombstone
	Raw   []byte
	Hdr   map[string]string
}

// readTopicRaw returns the values of every record currently in topic.
func (e *env) readTopicRaw(topic string) [][]byte {
	var out [][]byte
	for _, r := range e.fetch(topic, false) {
		out = append(out, r.Raw)
	}
	return out
}

// readTopic reads every record currently in topic, decoding change events.
func (e *env) readTopic(topic string) []rawRecord { return e.fetch(topic, true) }

func (e *env) fetch(topic string, decode bool) []rawRecord {
	e.t.Helper()
	var out []rawRecord
	e.scan(topic, decode, 30*time.Second, func(r rawRecord) { out = append(out, r) })
	return out
}

// scan calls fn for every record currently in topic, without keeping them.
func (e *env) scan(topic string, decode bool, timeout time.Duration, fn func(rawRecord)) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ends, err := e.k.Admin.ListEndOffsets(ctx, topic)
	if err != nil {
		e.t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.k.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	got := map[int32]int64{}
	for {
		done := true
		for p, end := range want {
			if got[p] < end {
				done = false
			}
		}
		if done {
			return
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			e.t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = r.Offset + 1
			rr := rawRecord{Key: string(r.Key), Raw: r.Value, Hdr: map[string]string{}}
			for _, h := range r.Headers {
				rr.Hdr[h.Key] = string(h.Value)
			}
			if r.Value != nil && decode {
				rr.Value = new(wire.Change)
				if err := json.Unmarshal(r.Value, rr.Value); err != nil {
					e.t.Fatalf("record %s of %s is not a change event: %v: %s", r.Key, topic, err, r.Value)
				}
			}
			fn(rr)
		})
	}
}

// waitRecords waits until topic holds at least n records and returns them.
func (e *env) waitRecords(topic string, n int) []rawRecord {
	e.t.Helper()
	var recs []rawRecord
	testenv.WaitFor(e.t, fmt.Sprintf("%d records in %s", n, topic), 60*time.Second, func() (bool, error) {
		if !e.topicExists(topic) {
			return false, fmt.Errorf("topic %s does not exist yet", topic)
		}
		recs = e.readTopic(topic)
		return len(recs) >= n, fmt.Errorf("have %d records", len(recs))
	})
	return recs
}

func (e *env) topicExists(topic string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := e.k.Admin.ListTopics(ctx, topic)
	return err == nil && td.Has(topic) && td[topic].Err == nil
}

// lastPerKey folds records into the last value per key (tombstones delete).
func lastPerKey(recs []rawRecord) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for _, r := range recs {
		if r.Key == string(wire.TruncateKey) {
			continue
		}
		if r.Value == nil {
			delete(m, r.Key)
			continue
		}
		if r.Value.Op == wire.OpDelete {
			continue
		}
		m[r.Key] = r.Value.After
	}
	return m
}

// tableState reads to_jsonb of every row, keyed like raw topic keys.
func (e *env) tableState(table, keyExpr string) map[string]json.RawMessage {
	e.t.Helper()
	rows, err := e.pg.Pool.Query(context.Background(), fmt.Sprintf("SELECT %s, to_jsonb(t) FROM %s t", keyExpr, table))
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]json.RawMessage{}
	for rows.Next() {
		var k string
		var v json.RawMessage
		if err := rows.Scan(&k, &v); err != nil {
			e.t.Fatal(err)
		}
		m[string(wire.AppendCompact(nil, []byte(k)))] = v
	}
	return m
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	da := json.NewDecoder(strings.NewReader(string(a)))
	da.UseNumber()
	db := json.NewDecoder(strings.NewReader(string(b)))
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// sameState compares the last record per key with the table.
func sameState(t *testing.T, got, want map[string]json.RawMessage) {
	t.Helper()
	var problems []string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("key %s missing from topic", k))
		} else if !jsonEqual(g, w) {
			problems = append(problems, fmt.Sprintf("key %s: topic %s, table %s", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("key %s in topic but not in table", k))
		}
	}
	if len(problems) > 0 {
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("… and %d more", len(problems)-20))
		}
		t.Fatalf("%d mismatches:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}
