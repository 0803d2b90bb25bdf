package resolver

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
}

func newMapMetrics(reg prometheus.Registerer) *mapMetrics {
	return &mapMetrics{
		changes: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_resolver_map_changes_total",
			Help: "Raw change events the map stage resolved, by table."}, []string{"table"})),
		skipped: register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "decant_resolver_map_unchanged_total",
			Help: "Route applications skipped because an update changed no watched column."})),
		refs: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_resolver_map_refs_total",
			Help: "Refs produced (after coalescing within a batch), by aggregate."}, []string{"aggregate"})),
		lookups: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "decant_resolver_map_lookup_seconds",
			Help: "Duration of one batched lookup query, rows streamed included.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})),
		batches: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "decant_resolver_map_batch_seconds",
			Help: "Duration of one polled batch, from poll to commit.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})),
		bad: register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "decant_resolver_map_undecodable_total",
			Help: "Raw records that are not change events (logged and skipped)."})),
		dlq: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_resolver_map_dlq_total",
			Help: "Updates and deletes without the before image the mappings need (replica identity not FULL), written to the dead-letter topic, by table."}, []string{"table"})),
	}
}

type buildMetrics struct {
	docs       *prometheus.CounterVec // by aggregate, result
	refs       *prometheus.CounterVec // by aggregate
	statements prometheus.Histogram
	writes     prometheus.Histogram
	invisible  prometheus.Counter
}

func newBuildMetrics(reg prometheus.Registerer) *buildMetrics {
	return &buildMetrics{
		docs: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_resolver_build_documents_total",
			Help: "Documents built and accepted by the sinks, by aggregate and result (built, deleted)."}, []string{"aggregate", "result"})),
		refs: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_resolver_build_refs_total",
			Help: "Refs consumed (before coalescing), by aggregate."}, []string{"aggregate"})),
		statements: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "decant_resolver_build_statement_seconds",
			Help: "Duration of one build statement (a chunk of ids).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})),
		writes: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "decant_resolver_build_sink_seconds",
			Help: "Duration of one Sink.Write.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})),
		invisible: register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "decant_resolver_build_not_visible_total",
			Help: "Batches retried because their transactions were not visible in time."})),
	}
}

// register registers c, or returns the collector already registered under
// its name (several stages of one kind in one process share metrics).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
