package resolver

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
)

// Config configures the map and build stages and backfills. Zero values
// take the defaults shown.
type Config struct {
	// Kafka are the client options (brokers, TLS, SASL). Required: at
	// least kgo.SeedBrokers.
	Kafka []kgo.Opt
	// TopicPrefix starts every topic: <prefix>.raw.…, <prefix>.refs.…,
	// <prefix>.agg.…. Default: decant.
	TopicPrefix string
	// Group is the consumer group prefix: the map stage joins
	// <Group>.map, the build stage <Group>.build. Default: TopicPrefix.
	Group string
	// Partitions and ReplicationFactor of the topics the resolver creates
	// (refs topics; raw topics the streamer has not created yet). Default: 6 and 1.
	Partitions        int
	ReplicationFactor int
	// MinInsyncReplicas of the topics the resolver creates. Default: 0
	// (the broker's default).
	MinInsyncReplicas int
	// BatchSize bounds the changes (map) or ids (build) one SQL statement
	// handles. Default: 500.
	BatchSize int
	// MaxBufferedRefs bounds the refs produced but not yet acknowledged;
	// a fan-out to millions of ids blocks on it (backpressure). Default: 10000.
	MaxBufferedRefs int
	// Workers is how many partitions of one polled batch the build stage
	// builds concurrently. Default: 4.
	Workers int
	// WriteBytes is about how many bytes of documents the build stage
	// hands to the sinks in one Write: built chunks are grouped up to it,
	// so that Elasticsearch gets bulk requests of this size. Default: 5 MiB.
	WriteBytes int
	// MaxInFlightBytes bounds the bytes of the documents of the refs the
	// build stage has in flight, at the size of the documents it built
	// lately: with large documents it polls fewer refs (docsize.go).
	// Default: 64 MiB.
	MaxInFlightBytes int
	// Aggregates restricts the stages to these aggregate names. Default: all.
	Aggregates []string
	// VisibilityTimeout is how long a build waits for the transactions
	// that triggered it to become visible before the batch is retried
	// from Kafka. Default: 30s.
	VisibilityTimeout time.Duration
	// SessionTimeout of the map and build stages' group members. Default: 45s.
	SessionTimeout time.Duration
	// Unfenced turns off the fencing of the build stage's writers
	// (resolver.fence: false): the sinks are written without Kafka
	// transactions and without the ownership lease (internal/fence).
	Unfenced bool
	// Logger receives lifecycle and progress lines. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the stage metrics. Default: none.
	Registerer prometheus.Registerer
}

func (c *Config) defaults() {
	d := config.Default()
	if c.TopicPrefix == "" {
		c.TopicPrefix = d.Kafka.TopicPrefix
	}
	if c.Group == "" {
		c.Group = c.TopicPrefix
	}
	if c.Partitions == 0 {
		c.Partitions = d.Kafka.Partitions
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = d.Kafka.ReplicationFactor
	}
	if c.BatchSize == 0 {
		c.BatchSize = d.Resolver.BatchSize
	}
	if c.MaxBufferedRefs == 0 {
		c.MaxBufferedRefs = 10000
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.WriteBytes == 0 {
		c.WriteBytes = 5 << 20
	}
	if c.MaxInFlightBytes == 0 {
		c.MaxInFlightBytes = d.Resolver.MaxInFlightBytes
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = d.Resolver.SessionTimeout
	}
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ConfigFrom maps decant.yaml onto the map and build stages: every value
// comes already defaulted from cfg; kopts are cfg.Kafka.ClientOptions().
// A group of documents written to the sinks makes one bulk request, so
// indexer.bulk_bytes sizes both.
func ConfigFrom(cfg *config.Config, kopts []kgo.Opt, log *slog.Logger, reg prometheus.Registerer) Config {
	return Config{
		Kafka: kopts, TopicPrefix: cfg.Kafka.TopicPrefix, Group: cfg.ResolverGroup(),
		Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor, MinInsyncReplicas: cfg.Kafka.MinInsync(),
		BatchSize: cfg.Resolver.BatchSize, MaxInFlightBytes: cfg.Resolver.MaxInFlightBytes, SessionTimeout: cfg.Resolver.SessionTimeout, Unfenced: !cfg.Resolver.Fence,
		WriteBytes: cfg.Indexer.BulkBytes, Logger: log, Registerer: reg,
	}
}

func (c *Config) validate() error {
	var errs []error
	if len(c.Kafka) == 0 {
		errs = append(errs, errors.New("resolver: Kafka client options are required (kafka.brokers)"))
	}
	if c.Partitions < 1 || c.ReplicationFactor < 1 {
		errs = append(errs, errors.New("resolver: partitions and replication factor must be at least 1 (kafka.partitions, kafka.replication_factor)"))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("resolver: batch size must be at least 1, got %d (resolver.batch_size)", c.BatchSize))
	}
	if c.MaxInFlightBytes < 1 {
		errs = append(errs, fmt.Errorf("resolver: max in-flight bytes must be at least 1, got %d (resolver.max_in_flight_bytes)", c.MaxInFlightBytes))
	}
	if c.MaxBufferedRefs < 1 || c.Workers < 1 {
		errs = append(errs, errors.New("resolver: MaxBufferedRefs and Workers must be at least 1"))
	}
	return errors.Join(errs...)
}
