package indexer

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/wire"
)

// TestKafkaSinkWritesEnvelopes: the records' values are the envelopes
// Encode gives, whether the build stage wrote a document in place in its
// envelope (FillEnvelope) or the sink encodes it, and each record's lsn
// header is its own document's version although records of one version
// share their headers.
func TestKafkaSinkWritesEnvelopes(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "p.agg.customer"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := NewKafkaSink(KafkaSinkConfig{Kafka: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, TopicPrefix: "p", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var arena wire.Arena
	var docs []wire.Document
	for id := range 7 {
		version := uint64(100 + id/3) // three documents per version, then the next
		d := wire.Document{Aggregate: "customer", ID: json.RawMessage(fmt.Sprintf(`{"id":%d}`, id)), Version: version, LSN: wire.FormatLSN(version), Built: true}
		doc := fmt.Appendf(nil, `{"id":%d,"name":"n%d"}`, id, id)
		switch id {
		case 4: // encoded by the sink
			d.Doc = doc
		case 5:
			d.Built, d.Deleted = false, true
		default:
			d.FillEnvelope(&arena, len(doc), func(dst []byte) []byte { return append(dst, doc...) })
			if d.Envelope == nil {
				t.Fatalf("document %d: FillEnvelope wrote no envelope", id)
			}
		}
		docs = append(docs, d)
	}
	if err := s.Write(ctx, docs); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{} // key → values (with the deleted one's tombstone), in order
	lsns := map[string]string{}
	for _, d := range docs {
		v, err := d.Encode()
		if err != nil {
			t.Fatal(err)
		}
		want[string(d.ID)] = append(want[string(d.ID)], string(v))
		if d.Deleted {
			want[string(d.ID)] = append(want[string(d.ID)], "<tombstone>")
		}
		lsns[string(d.ID)] = d.LSN
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("p.agg.customer"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string][]string{}
	for n := 0; n < len(docs)+1; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", n, len(docs)+1, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			v := string(r.Value)
			if r.Value == nil {
				v = "<tombstone>"
			}
			got[string(r.Key)] = append(got[string(r.Key)], v)
			if len(r.Headers) != 1 || r.Headers[0].Key != wire.HeaderLSN || string(r.Headers[0].Value) != lsns[string(r.Key)] {
				t.Errorf("record %s: headers %v, want %s=%s", r.Key, r.Headers, wire.HeaderLSN, lsns[string(r.Key)])
			}
		})
	}
	for k, w := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(w) {
			t.Errorf("key %s: values %q, want %q", k, got[k], w)
		}
	}
}
