package indexer

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/decant-cdc/decant/internal/metric"
)

// sinkKafka names the aggregate topic sink in the sink label and in dead
// letters; the search sinks use their engine's kind (KindElasticsearch,
// KindOpenSearch).
const sinkKafka = "kafka"

// metrics of both sinks; labels are bounded (sink, aggregate, op — never an id).
// Both sinks may register on one Registerer: the second reuses the
// collectors the first registered.
type metrics struct {
	docs      *prometheus.CounterVec // sink, aggregate, op (index|delete)
	conflicts *prometheus.CounterVec // sink, aggregate
	dlq       *prometheus.CounterVec // sink, aggregate
	retries   *prometheus.CounterVec // sink
	latency   *prometheus.HistogramVec
	requests  *prometheus.CounterVec // sink: bulk requests sent (search sinks), transactions committed (kafka, fenced)
	parts     *prometheus.CounterVec // sink: writers' chunks they carried
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		docs:      metric.Register(reg, metric.CounterVec("decant_indexer_docs_total", "Documents a sink accepted (written or deleted), by sink, aggregate and op.", "sink", "aggregate", "op")),
		conflicts: metric.Register(reg, metric.CounterVec("decant_indexer_conflicts_total", "Documents skipped because the sink already held the same or a newer version (Elasticsearch 409, Kafka version guard). Counted as success.", "sink", "aggregate")),
		dlq:       metric.Register(reg, metric.CounterVec("decant_indexer_dlq_total", "Documents a sink refused for good, written to the dead-letter topic instead.", "sink", "aggregate")),
		retries:   metric.Register(reg, metric.CounterVec("decant_indexer_retries_total", "Retry rounds after retriable errors (429, 5xx, blocked index, connection loss).", "sink")),
		latency:   metric.Register(reg, metric.SecondsVec("decant_indexer_write_seconds", "Duration of one Write call, until every document is acknowledged.", 16, "sink")),
		requests:  metric.Register(reg, metric.CounterVec("decant_indexer_bulk_requests_total", "Bulk requests a search sink sent; for the aggregate topic sink (sink=kafka) in a build stage, the Kafka transactions it committed.", "sink")),
		parts:     metric.Register(reg, metric.CounterVec("decant_indexer_bulk_parts_total", "Chunks of concurrent writes the bulk requests (or Kafka transactions) carried: more parts than requests means writes were coalesced.", "sink")),
	}
}

// Stats are a sink's counters since it was created, for tests, benchmarks
// and `decant status`.
type Stats struct {
	Written      int64 // documents indexed (Elasticsearch) or produced (Kafka)
	Deleted      int64 // deletes applied (Elasticsearch: including 404) or deleted envelopes produced (Kafka)
	Conflicts    int64 // skipped because the same or a newer version was there (409)
	DeadLettered int64 // written to the dead-letter topic
	Retries      int64 // retry rounds
	Requests     int64 // bulk requests sent (search sinks); transactions committed (Kafka, through fenced writers)
	Parts        int64 // writes' chunks those requests carried: more than Requests when coalesced
}

type stats struct {
	written, deleted, conflicts, dlq, retries, requests, parts atomic.Int64
}

func (s *stats) snapshot() Stats {
	return Stats{Written: s.written.Load(), Deleted: s.deleted.Load(), Conflicts: s.conflicts.Load(),
		DeadLettered: s.dlq.Load(), Retries: s.retries.Load(), Requests: s.requests.Load(), Parts: s.parts.Load()}
}
