package streamer

import "github.com/prometheus/client_golang/prometheus"

// metrics of the streamer; labels are bounded (table names, never keys).
type metrics struct {
	rows           *prometheus.CounterVec
	bytes          prometheus.Counter
	slotLag        prometheus.Gauge
	lastCommit     prometheus.Gauge
	produceLatency prometheus.Histogram
	confirmedLSN   prometheus.Gauge
	snapshotRows   prometheus.Counter
	dlq            prometheus.Counter
	streamedTxns   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "decant_streamer_rows_total",
			Help: "Row change events written to raw topics, by table and op."}, []string{"table", "op"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "decant_streamer_bytes_total",
			Help: "Bytes of raw change events written (keys and values)."}),
		slotLag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "decant_streamer_slot_lag_bytes",
			Help: "pg_current_wal_lsn() minus the slot's confirmed_flush_lsn."}),
		lastCommit: prometheus.NewGauge(prometheus.GaugeOpts{Name: "decant_streamer_last_commit_timestamp_seconds",
			Help: "Commit time of the last transaction seen (unix seconds)."}),
		produceLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "decant_streamer_produce_latency_seconds",
			Help: "Time from handing a record to the producer to Kafka's acknowledgement.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		confirmedLSN: prometheus.NewGauge(prometheus.GaugeOpts{Name: "decant_streamer_confirmed_lsn",
			Help: "LSN (as a number) confirmed to the slot: every change before it is in Kafka."}),
		snapshotRows: prometheus.NewCounter(prometheus.CounterOpts{Name: "decant_streamer_snapshot_rows_total",
			Help: "Rows read by initial snapshots."}),
		dlq: prometheus.NewCounter(prometheus.CounterOpts{Name: "decant_streamer_dlq_total",
			Help: "Raw events Kafka refused (for example too large), written to the dead-letter topic instead."}),
		streamedTxns: prometheus.NewCounter(prometheus.CounterOpts{Name: "decant_streamer_spooled_transactions_total",
			Help: "Transactions PostgreSQL streamed before their commit (larger than logical_decoding_work_mem), spooled to a temporary file."}),
	}
	if reg != nil {
		reg.MustRegister(m.rows, m.bytes, m.slotLag, m.lastCommit, m.produceLatency, m.confirmedLSN, m.snapshotRows, m.dlq, m.streamedTxns)
	}
	return m
}
