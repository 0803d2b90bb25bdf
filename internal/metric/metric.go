// Package metric builds the Prometheus collectors of the stages, one line
// each, and registers them so that several stages of one kind in one
// process share them. Labels stay bounded (stage, table, aggregate, sink —
// never an id); that is up to the caller.
package metric

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Counter is an unregistered counter.
func Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// CounterVec is an unregistered counter with labels.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Gauge is an unregistered gauge.
func Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// Seconds is an unregistered histogram of durations in seconds, with n
// exponential buckets from 1ms, each twice the one before.
func Seconds(name, help string, n int) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(0.001, 2, n)})
}

// SecondsVec is Seconds with labels.
func SecondsVec(name, help string, n int, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(0.001, 2, n)}, labels)
}

// Register registers c on reg and returns it, or returns the collector
// already registered under its name (several stages of one kind in one
// process share metrics). A nil reg registers nothing. Any other
// registration error panics: it is a programming error.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
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

// KafkaRequests is a franz-go hook (kgo.WithHooks) that counts the
// requests a process writes to Kafka's brokers, their bytes and the bytes
// of the responses, by request type (Produce, Fetch, OffsetCommit,
// EndTxn…), registered on reg. Every client of the process shares it.
func KafkaRequests(reg prometheus.Registerer) kgo.Hook {
	return kafkaRequests{
		n:        Register(reg, CounterVec("decant_kafka_requests_total", "Requests written to Kafka brokers, by request type.", "request")),
		written:  Register(reg, CounterVec("decant_kafka_request_bytes_total", "Bytes of the requests written to Kafka brokers, by request type.", "request")),
		received: Register(reg, CounterVec("decant_kafka_response_bytes_total", "Bytes of the responses read from Kafka brokers, by request type.", "request")),
	}
}

type kafkaRequests struct{ n, written, received *prometheus.CounterVec }

func (k kafkaRequests) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, written int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	name := kmsg.NameForKey(key)
	k.n.WithLabelValues(name).Inc()
	k.written.WithLabelValues(name).Add(float64(written))
}

func (k kafkaRequests) OnBrokerRead(_ kgo.BrokerMetadata, key int16, read int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	k.received.WithLabelValues(kmsg.NameForKey(key)).Add(float64(read))
}
