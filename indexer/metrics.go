package indexer

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Sink names used as the sink label and in dead letters.
const (
	sinkKafka = "kafka"
	sinkES    = "elasticsearch"
)

// metrics of both sinks; labels are bounded (sink, aggregate, op — never an id).
// Both sinks may register on one Registerer: the second reuses the
// collectors the first registered.
type metrics struct {
	docs      *prometheus.CounterVec // sink, aggregate, op (index|delete)
	conflicts *prometheus.CounterVec // sink, aggregate
	dlq       *prometheus.CounterVec // sink, aggregate
	retries   *prometheus.CounterVec // sink
	latency   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		docs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_indexer_docs_total",
			Help: "Documents a sink accepted (written or deleted), by sink, aggregate and op."}, []string{"sink", "aggregate", "op"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_indexer_conflicts_total",
			Help: "Documents skipped because the sink already held the same or a newer version (Elasticsearch 409, Kafka version guard). Counted as success."}, []string{"sink", "aggregate"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_indexer_dlq_total",
			Help: "Documents a sink refused for good, written to the dead-letter topic instead."}, []string{"sink", "aggregate"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_indexer_retries_total",
			Help: "Retry rounds after retriable errors (429, 5xx, blocked index, connection loss)."}, []string{"sink"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "decant_indexer_write_seconds",
			Help: "Duration of one Write call, until every document is acknowledged.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"sink"}),
	}
	if reg != nil {
		m.docs = register(reg, m.docs)
		m.conflicts = register(reg, m.conflicts)
		m.dlq = register(reg, m.dlq)
		m.retries = register(reg, m.retries)
		m.latency = register(reg, m.latency)
	}
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
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

// Stats are a sink's counters since it was created, for tests, benchmarks
// and `decant status`.
type Stats struct {
	Written      int64 // documents indexed (Elasticsearch) or produced (Kafka)
	Deleted      int64 // deletes applied (Elasticsearch: including 404) or deleted envelopes produced (Kafka)
	Conflicts    int64 // skipped because the same or a newer version was there (409)
	DeadLettered int64 // written to the dead-letter topic
	Retries      int64 // retry rounds
}

type stats struct {
	written, deleted, conflicts, dlq, retries atomic.Int64
}

func (s *stats) snapshot() Stats {
	return Stats{Written: s.written.Load(), Deleted: s.deleted.Load(), Conflicts: s.conflicts.Load(),
		DeadLettered: s.dlq.Load(), Retries: s.retries.Load()}
}
