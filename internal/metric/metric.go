// Package metric builds the Prometheus collectors of the stages, one line
// each, and registers them so that several stages of one kind in one
// process share them. Labels stay bounded (stage, table, aggregate, sink —
// never an id); that is up to the caller.
package metric

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
