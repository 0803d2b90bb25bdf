package streamer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/decant-cdc/decant/internal/metric"
)

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
		rows:           metric.CounterVec("decant_streamer_rows_total", "Row change events written to raw topics, by table and op.", "table", "op"),
		bytes:          metric.Counter("decant_streamer_bytes_total", "Bytes of raw change events written (keys and values)."),
		slotLag:        metric.Gauge("decant_streamer_slot_lag_bytes", "pg_current_wal_lsn() (on a standby pg_last_wal_replay_lsn()) minus the slot's confirmed_flush_lsn."),
		lastCommit:     metric.Gauge("decant_streamer_last_commit_timestamp_seconds", "Commit time of the last transaction seen (unix seconds)."),
		produceLatency: metric.Seconds("decant_streamer_produce_latency_seconds", "Time from handing a record to the producer to Kafka's acknowledgement.", 14),
		confirmedLSN:   metric.Gauge("decant_streamer_confirmed_lsn", "LSN (as a number) confirmed to the slot: every change before it is in Kafka."),
		snapshotRows:   metric.Counter("decant_streamer_snapshot_rows_total", "Rows read by snapshots: the initial one and online table snapshots."),
		dlq:            metric.Counter("decant_streamer_dlq_total", "Raw events Kafka refused (for example too large), written to the dead-letter topic instead."),
		streamedTxns:   metric.Counter("decant_streamer_spooled_transactions_total", "Transactions PostgreSQL streamed before their commit (larger than logical_decoding_work_mem), spooled to a temporary file."),
	}
	if reg != nil {
		reg.MustRegister(m.rows, m.bytes, m.slotLag, m.lastCommit, m.produceLatency, m.confirmedLSN, m.snapshotRows, m.dlq, m.streamedTxns)
	}
	return m
}
