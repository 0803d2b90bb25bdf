package indexer

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/decant-cdc/decant/internal/fence"
	"github.com/decant-cdc/decant/wire"
)

// TestFencedWriteRetriesConcurrentTransactionsAtOnce: a transactional
// produce answered with CONCURRENT_TRANSACTIONS (Kafka 4 sends it when the
// previous transaction's markers have not reached the partition yet) is
// retried after the metadata refresh it triggers; a writer that kept
// franz-go's 5 s minimum between refreshes held its refs partition that
// long. kfake answers the first transactional produce so.
func TestFencedWriteRetriesConcurrentTransactionsAtOnce(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "p.agg.customer"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var refused atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.ProduceRequest)
		if req.TransactionID == nil || refused.Load() > 0 {
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.ConcurrentTransactions.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := NewKafkaSink(KafkaSinkConfig{Kafka: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, TopicPrefix: "p", Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := fence.New(time.Minute)
	defer f.Close()
	writer := fence.WriterID("p.refs.customer", 0)
	if err := s.OpenWriters(ctx, f, "p.build", []string{writer}); err != nil {
		t.Fatal(err)
	}
	var docs []wire.Document
	for id := range 6 {
		docs = append(docs, wire.Document{Aggregate: "customer", ID: json.RawMessage(fmt.Sprintf(`{"id":%d}`, id)),
			Version: 10, LSN: wire.FormatLSN(10), Doc: json.RawMessage(`{"ok":true}`), Writer: writer})
	}
	// The writer's metadata is fresh from opening it: the refresh the
	// refusal triggers is one a 5 s minimum would hold back.
	started := time.Now()
	if err := s.Write(fence.With(ctx, f), docs); err != nil {
		t.Fatal(err)
	}
	took := time.Since(started)
	if refused.Load() != 1 {
		t.Fatalf("kfake refused %d transactional produces, want 1", refused.Load())
	}
	t.Logf("write after a CONCURRENT_TRANSACTIONS answer took %s", took)
	if took > 2*time.Second {
		t.Errorf("the write took %s after one CONCURRENT_TRANSACTIONS answer, want well under franz-go's 5 s metadata minimum", took)
	}
	if st := s.Stats(); st.Written != 6 || st.Requests != 1 {
		t.Errorf("stats %+v: want 6 written in 1 transaction", st)
	}
}
