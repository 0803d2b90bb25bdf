package metric

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaRequests: the hook counts each request a client writes, by
// type, with the bytes written and read.
func TestKafkaRequests(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := prometheus.NewRegistry()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(KafkaRequests(reg)), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: make([]byte, 1000)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// A second hook on the same registry shares the series.
	h := KafkaRequests(reg).(kafkaRequests)
	value := func(c *prometheus.CounterVec, request string) float64 {
		var m dto.Metric
		if err := c.WithLabelValues(request).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	n, w, r := value(h.n, "Produce"), value(h.written, "Produce"), value(h.received, "Produce")
	if n != 3 || w < 3000 || r == 0 {
		t.Fatalf("Produce: %v requests, %v bytes written, %v read; want 3 requests of over 1,000 bytes each and their responses", n, w, r)
	}
	if value(h.n, "Metadata") == 0 {
		t.Fatal("no Metadata request counted")
	}
}
