package resolver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/decant-cdc/decant/internal/metric"
)

// Metrics have bounded labels: aggregate and table names, never ids.

type mapMetrics struct {
	changes *prometheus.CounterVec // by table
	skipped prometheus.Counter
	refs    *prometheus.CounterVec // by aggregate
	lookups prometheus.Histogram
	batches prometheus.Histogram
	bad     prometheus.Counter
	dlq     *prometheus.CounterVec // by table
	gaps    *prometheus.CounterVec // by table
	gens    *generations
}

// groupGenerations is shared by the map and build stages, by stage.
func groupGenerations(reg prometheus.Registerer) *prometheus.CounterVec {
	return metric.Register(reg, metric.CounterVec("decant_resolver_group_generations_total",
		"Consumer group generations the stage's member has been part of: 1 after a start, one more per rebalance.", "stage"))
}

// generations counts the group generations a stage's member polled in.
// Only the stage's session goroutine calls observe.
type generations struct {
	last int32
	c    prometheus.Counter
}

// observe counts cl's generation when it is new.
func (g *generations) observe(cl interface{ GroupMetadata() (string, int32) }) {
	if _, gen := cl.GroupMetadata(); gen > 0 && gen != g.last {
		g.last = gen
		g.c.Inc()
	}
}

func newMapMetrics(reg prometheus.Registerer) *mapMetrics {
	return &mapMetrics{
		changes: metric.Register(reg, metric.CounterVec("decant_resolver_map_changes_total", "Raw change events the map stage resolved, by table.", "table")),
		skipped: metric.Register(reg, metric.Counter("decant_resolver_map_unchanged_total", "Route applications skipped because an update changed no watched column.")),
		refs:    metric.Register(reg, metric.CounterVec("decant_resolver_map_refs_total", "Refs produced (after coalescing within a batch), by aggregate.", "aggregate")),
		lookups: metric.Register(reg, metric.Seconds("decant_resolver_map_lookup_seconds", "Duration of one batched lookup query, rows streamed included.", 16)),
		batches: metric.Register(reg, metric.Seconds("decant_resolver_map_batch_seconds", "Duration of one polled batch, from poll to commit.", 16)),
		bad:     metric.Register(reg, metric.Counter("decant_resolver_map_undecodable_total", "Raw records that are not change events, written to the dead-letter topic.")),
		gaps:    metric.Register(reg, metric.CounterVec("decant_resolver_map_compacted_gaps_total", "Holes found in a raw topic: records compacted away before the map stage read them, each repaired by rebuilding every document of the aggregates using the table, by table.", "table")),
		dlq:     metric.Register(reg, metric.CounterVec("decant_resolver_map_dlq_total", "Updates and deletes without the before image the mappings need (replica identity not FULL), written to the dead-letter topic, by table.", "table")),
		gens:    &generations{c: groupGenerations(reg).WithLabelValues("map")},
	}
}

type buildMetrics struct {
	docs       *prometheus.CounterVec // by aggregate, result
	refs       *prometheus.CounterVec // by aggregate
	statements prometheus.Histogram
	writes     prometheus.Histogram
	invisible  prometheus.Counter
	bad        prometheus.Counter
	inFlight   prometheus.Gauge
	peak       prometheus.Gauge
	refsLimit  prometheus.Gauge
	peakRefs   int // the highest inFlight so far; only the pipeline's goroutine sets it
	gens       *generations
}

func newBuildMetrics(reg prometheus.Registerer) *buildMetrics {
	return &buildMetrics{
		docs:       metric.Register(reg, metric.CounterVec("decant_resolver_build_documents_total", "Documents built and accepted by the sinks, by aggregate and result (built, deleted).", "aggregate", "result")),
		refs:       metric.Register(reg, metric.CounterVec("decant_resolver_build_refs_total", "Refs consumed (before coalescing), by aggregate.", "aggregate")),
		statements: metric.Register(reg, metric.Seconds("decant_resolver_build_statement_seconds", "Duration of one build statement (a chunk of ids).", 16)),
		writes:     metric.Register(reg, metric.Seconds("decant_resolver_build_sink_seconds", "Duration of one Sink.Write.", 16)),
		invisible:  metric.Register(reg, metric.Counter("decant_resolver_build_not_visible_total", "Batches retried because their transactions were not visible in time.")),
		bad:        metric.Register(reg, metric.Counter("decant_resolver_build_undecodable_total", "Refs records whose key is not an id of their aggregate or whose value is not a ref, written to the dead-letter topic.")),
		inFlight:   metric.Register(reg, metric.Gauge("decant_resolver_build_refs_in_flight", "Refs the build stage has polled and not yet committed: at most 4 polls of 8 chunks of BatchSize ids per worker.")),
		peak:       metric.Register(reg, metric.Gauge("decant_resolver_build_refs_in_flight_peak", "The most refs in flight at once since the build stage started.")),
		refsLimit:  metric.Register(reg, metric.Gauge("decant_resolver_build_refs_in_flight_limit", "The refs the build stage may have in flight now: 4 polls of 8 chunks of BatchSize ids per worker, or fewer when their documents, at the size of those built lately, would exceed resolver.max_in_flight_bytes.")),
		gens:       &generations{c: groupGenerations(reg).WithLabelValues("build")},
	}
}

// setInFlight records the refs of the batches in flight.
func (m *buildMetrics) setInFlight(inflight []*batch) {
	n := 0
	for _, bt := range inflight {
		n += len(bt.recs)
	}
	m.inFlight.Set(float64(n))
	if n > m.peakRefs {
		m.peakRefs = n
		m.peak.Set(float64(n))
	}
}
