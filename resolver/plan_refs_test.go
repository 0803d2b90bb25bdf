package resolver

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// TestPlanCountsRefsBeforeCoalescing: decant_resolver_build_refs_total
// counts every ref a batch consumed, per aggregate, repeated keys
// included, though the batch builds each key once.
func TestPlanCountsRefsBeforeCoalescing(t *testing.T) {
	one := &mappings.Aggregate{Name: "one", ID: []string{"id"}}
	two := &mappings.Aggregate{Name: "two", ID: []string{"id"}}
	b := &Builder{cfg: Config{BatchSize: 10}, met: newBuildMetrics(prometheus.NewRegistry()),
		byTopic: map[string]*mappings.Aggregate{wire.RefsTopic("p", "one"): one, wire.RefsTopic("p", "two"): two}}
	ref := []byte(`{"aggregate":"one","lsn":"0/1"}`)
	var recs []*kgo.Record
	for _, k := range []string{`{"id":1}`, `{"id":2}`, `{"id":1}`, `{"id":3}`, `{"id":1}`} {
		recs = append(recs, &kgo.Record{Topic: wire.RefsTopic("p", "one"), Key: []byte(k), Value: ref})
	}
	recs = append(recs, &kgo.Record{Topic: wire.RefsTopic("p", "two"), Key: []byte(`{"id":9}`), Value: ref})
	bt := b.plan(recs)
	for agg, want := range map[string]float64{"one": 5, "two": 1} {
		var m dto.Metric
		if err := b.met.refs.WithLabelValues(agg).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("refs of %s = %v, want %v", agg, got, want)
		}
	}
	keys := 0
	for _, c := range bt.chunks {
		keys += len(c.keys)
	}
	if keys != 4 {
		t.Errorf("the batch builds %d keys, want 4 (1, 2, 3 of one, 9 of two)", keys)
	}
}
