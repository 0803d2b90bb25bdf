package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/fence"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// idxDoc is a test document: doc nil means deleted.
func idxDoc(agg, id string, version uint64, doc string) wire.Document {
	d := wire.Document{Aggregate: agg, ID: json.RawMessage(id), Version: version, LSN: wire.FormatLSN(version)}
	if doc == "" {
		d.Deleted = true
	} else {
		d.Doc = json.RawMessage(doc)
	}
	return d
}

// idxConsume reads topic from the start until it holds n records, in
// partition order per partition.
func idxConsume(t *testing.T, k *testenv.KafkaEnv, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(testenv.Ctx(t), 30*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topic %s: got %d records, want %d", topic, len(got), n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch %s: %v", topic, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	if len(got) > n {
		t.Fatalf("topic %s: got %d records, want %d", topic, len(got), n)
	}
	return got
}

func idxKafkaSink(t *testing.T, k *testenv.KafkaEnv) *indexer.KafkaSink {
	t.Helper()
	s, err := indexer.NewKafkaSink(indexer.KafkaSinkConfig{Kafka: []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, TopicPrefix: k.Prefix, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestKafkaSinkEnvelopeAndTombstone checks the aggregate topic format
// (PRODUCT.md §5): key = the id object as given, value = the envelope, a
// tombstone after a deleted document, a compacted topic.
func TestKafkaSinkEnvelopeAndTombstone(t *testing.T) {
	k := testenv.Kafka(t)
	ctx := testenv.Ctx(t)
	s := idxKafkaSink(t, k)
	err := s.Write(ctx, []wire.Document{
		idxDoc("customer", `{"id":7}`, 23803720, `{"id":7,"name":"Ann","orders":[{"id":1,"total":19.90}]}`),
		idxDoc("customer", `{"id":7}`, 23803721, ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	topic := wire.AggTopic(k.Prefix, "customer")
	recs := idxConsume(t, k, topic, 3)
	want := []struct{ key, value string }{
		{`{"id":7}`, `{"aggregate":"customer","id":{"id":7},"version":23803720,"lsn":"0/16B3748","deleted":false,"doc":{"id":7,"name":"Ann","orders":[{"id":1,"total":19.90}]}}`},
		{`{"id":7}`, `{"aggregate":"customer","id":{"id":7},"version":23803721,"lsn":"0/16B3749","deleted":true,"doc":null}`},
		{`{"id":7}`, ""},
	}
	for i, r := range recs {
		if string(r.Key) != want[i].key || string(r.Value) != want[i].value {
			t.Errorf("record %d = %s → %s, want %s → %s", i, r.Key, r.Value, want[i].key, want[i].value)
		}
	}
	if recs[2].Value != nil {
		t.Errorf("the record after a deleted document must be a tombstone (null value), got %q", recs[2].Value)
	}
	cfgs, err := k.Admin.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfgs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && (c.Value == nil || *c.Value != "compact") {
			t.Errorf("%s cleanup.policy = %v, want compact", topic, c.MaybeValue())
		}
	}
	if st := s.Stats(); st.Written != 1 || st.Deleted != 1 {
		t.Errorf("stats = %+v, want 1 written and 1 deleted", st)
	}
}

// TestKafkaSinkVersionsNeverDecrease writes many versions of a few keys
// from concurrent writers (each key owned by one writer, as refs
// partitions guarantee), mixed with stale replays, and checks that per key
// the versions in the topic never decrease.
func TestKafkaSinkVersionsNeverDecrease(t *testing.T) {
	k := testenv.Kafka(t)
	ctx := testenv.Ctx(t)
	s := idxKafkaSink(t, k)
	const writers, keysPerWriter, rounds = 4, 5, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				var batch []wire.Document
				for i := range keysPerWriter {
					id := fmt.Sprintf(`{"id":%d}`, w*100+i)
					v := uint64(1000 + r*10)
					batch = append(batch, idxDoc("item", id, v, fmt.Sprintf(`{"round":%d}`, r)))
					if r > 2 {
						batch = append(batch, idxDoc("item", id, v-25, `{"stale":true}`)) // a replayed older build
					}
				}
				if err := s.Write(ctx, batch); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := writers * keysPerWriter * rounds
	recs := idxConsume(t, k, wire.AggTopic(k.Prefix, "item"), n)
	last := map[string]uint64{}
	for _, r := range recs {
		var d wire.Document
		if err := json.Unmarshal(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.Version < last[string(r.Key)] {
			t.Errorf("key %s: version %d after %d", r.Key, d.Version, last[string(r.Key)])
		}
		last[string(r.Key)] = d.Version
		if strings.Contains(string(d.Doc), "stale") {
			t.Errorf("key %s: a stale build reached the topic: %s", r.Key, r.Value)
		}
	}
	if st := s.Stats(); st.Conflicts != int64(writers*keysPerWriter*(rounds-3)) {
		t.Errorf("conflicts = %d, want %d", st.Conflicts, writers*keysPerWriter*(rounds-3))
	}
}

// TestKafkaSinkTooLargeGoesToDLQ: a document Kafka can never take is
// dead-lettered with its reason and the rest of the batch is written.
func TestKafkaSinkTooLargeGoesToDLQ(t *testing.T) {
	k := testenv.Kafka(t)
	ctx := testenv.Ctx(t)
	s := idxKafkaSink(t, k)
	// The too-large document is neither first nor last: its result comes
	// back before the others' (franz-go answers in completion order), and
	// must still be told apart from theirs.
	big := `{"blob":"` + strings.Repeat("x", 2<<20) + `"}`
	var docs []wire.Document
	for id := 1; id <= 6; id++ {
		body := fmt.Sprintf(`{"ok":%d}`, id)
		if id == 3 {
			body = big
		}
		docs = append(docs, idxDoc("blob", fmt.Sprintf(`{"id":%d}`, id), 10, body))
	}
	if err := s.Write(ctx, docs); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, r := range idxConsume(t, k, wire.AggTopic(k.Prefix, "blob"), 5) {
		keys[string(r.Key)] = true
	}
	if len(keys) != 5 || keys[`{"id":3}`] {
		t.Errorf("aggregate topic holds %v, want every id but 3", keys)
	}
	dlq := idxConsume(t, k, wire.DLQTopic(k.Prefix), 1)
	var l map[string]any
	if err := json.Unmarshal(dlq[0].Value, &l); err != nil {
		t.Fatal(err)
	}
	if string(dlq[0].Key) != `{"id":3}` || l["stage"] != "index" || l["sink"] != "kafka" || l["aggregate"] != "blob" ||
		l["version"] != float64(10) || !strings.Contains(fmt.Sprint(l["reason"]), "MESSAGE_TOO_LARGE") {
		t.Errorf("dead letter %s → %s", dlq[0].Key, dlq[0].Value)
	}
	if st := s.Stats(); st.DeadLettered != 1 || st.Written != 5 {
		t.Errorf("stats = %+v", st)
	}
}

// TestKafkaSinkFencedWriters: in a build stage session (a fence.Fence in
// the context) documents go through the transactional writer of their
// refs partition. A second session that opens the same partition's
// writer fences the first: the first's later writes fail, lose its fence
// and never reach read-committed consumers, the second's do.
func TestKafkaSinkFencedWriters(t *testing.T) {
	k := testenv.Kafka(t)
	ctx := testenv.Ctx(t)
	group, writer := k.Prefix+".build", fence.WriterID(k.Prefix+".refs.customer", 0)
	doc := func(version uint64, name string) []wire.Document {
		d := idxDoc("customer", `{"id":7}`, version, `{"id":7,"name":"`+name+`"}`)
		d.Writer = writer
		return []wire.Document{d}
	}
	oldSink, newSink := idxKafkaSink(t, k), idxKafkaSink(t, k)
	old := fence.New(time.Minute)
	defer old.Close()
	if err := oldSink.OpenWriters(ctx, old, group, []string{writer}); err != nil {
		t.Fatal(err)
	}
	if err := oldSink.Write(fence.With(ctx, old), doc(10, "first")); err != nil {
		t.Fatalf("write before any successor: %v", err)
	}
	// A document without a writer of this session is refused.
	stray := doc(11, "stray")
	stray[0].Writer = fence.WriterID(k.Prefix+".refs.customer", 1)
	if err := oldSink.Write(fence.With(ctx, old), stray); err == nil || !errors.Is(err, fence.ErrLost) {
		t.Errorf("a write through a partition this session does not own: err %v, want fence.ErrLost", err)
	}

	successor := fence.New(time.Minute)
	defer successor.Close()
	if err := newSink.OpenWriters(ctx, successor, group, []string{writer}); err != nil {
		t.Fatal(err)
	}
	err := oldSink.Write(fence.With(ctx, old), doc(12, "zombie"))
	if err == nil {
		t.Fatal("the first session wrote after its successor opened the partition's writer")
	}
	if cerr := old.Check(); !errors.Is(cerr, fence.ErrLost) {
		t.Errorf("the fenced session's fence: %v, want lost", cerr)
	}
	t.Logf("fenced write: %v", err)
	if err := newSink.Write(fence.With(ctx, successor), doc(13, "successor")); err != nil {
		t.Fatalf("the successor's write: %v", err)
	}
	var names []string
	for _, r := range k.Records(t, wire.AggTopic(k.Prefix, "customer")) {
		var d struct {
			Doc struct{ Name string } `json:"doc"`
		}
		if err := json.Unmarshal(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		names = append(names, d.Doc.Name)
	}
	if got := strings.Join(names, ","); got != "first,successor" {
		t.Errorf("read committed, the aggregate topic holds %q, want %q", got, "first,successor")
	}
}

// TestKafkaSinkFencedWritesShareTransactions: concurrent writes through one
// refs partition's writer that wait for its transaction share the next one
// (group commit), each still answered with its own records' results: every
// document reaches read-committed consumers once, a too-large one among
// them goes to the dead-letter topic without failing the others, and far
// fewer transactions than writes are committed.
func TestKafkaSinkFencedWritesShareTransactions(t *testing.T) {
	k := testenv.Kafka(t)
	ctx := testenv.Ctx(t)
	group, writer := k.Prefix+".build", fence.WriterID(k.Prefix+".refs.customer", 0)
	s := idxKafkaSink(t, k)
	f := fence.New(time.Minute)
	defer f.Close()
	if err := s.OpenWriters(ctx, f, group, []string{writer}); err != nil {
		t.Fatal(err)
	}
	const writes, perWrite, big = 60, 3, 17
	var wg sync.WaitGroup
	errs := make([]error, writes)
	for w := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var docs []wire.Document
			for i := range perWrite {
				id := w*perWrite + i
				body := fmt.Sprintf(`{"id":%d}`, id)
				if w == big && i == 1 {
					body = `{"blob":"` + strings.Repeat("x", 2<<20) + `"}`
				}
				d := idxDoc("customer", fmt.Sprintf(`{"id":%d}`, id), uint64(100+id), body)
				d.Writer = writer
				docs = append(docs, d)
			}
			errs[w] = s.Write(fence.With(ctx, f), docs)
		}()
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", w, err)
		}
	}
	want := writes*perWrite - 1
	seen := map[string]bool{}
	for _, r := range k.Records(t, wire.AggTopic(k.Prefix, "customer")) {
		if seen[string(r.Key)] {
			t.Errorf("document %s read twice", r.Key)
		}
		seen[string(r.Key)] = true
	}
	if len(seen) != want || seen[fmt.Sprintf(`{"id":%d}`, big*perWrite+1)] {
		t.Errorf("read committed, the aggregate topic holds %d documents, want %d (all but the too-large one)", len(seen), want)
	}
	if dlq := idxConsume(t, k, wire.DLQTopic(k.Prefix), 1); string(dlq[0].Key) != fmt.Sprintf(`{"id":%d}`, big*perWrite+1) {
		t.Errorf("dead letter for %s, want the too-large document", dlq[0].Key)
	}
	st := s.Stats()
	t.Logf("%d writes in %d transactions", st.Parts, st.Requests)
	if st.Parts != writes || st.Requests < 1 || st.Requests > writes/2 {
		t.Errorf("stats %+v: want the %d writes (parts) carried by at most %d transactions (requests)", st, writes, writes/2)
	}
	if st.Written != int64(want) || st.DeadLettered != 1 {
		t.Errorf("stats %+v: want %d written, 1 dead-lettered", st, want)
	}
}
