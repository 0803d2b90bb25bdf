package streamer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config configures a Streamer. Zero values take the defaults shown.
type Config struct {
	// DSN of the source database (a normal libpq DSN; decant adds
	// replication=database itself). Required.
	DSN string
	// Publication to stream. Default: decant.
	Publication string
	// CreatePublication creates the publication when missing, FOR the
	// Tables below (or FOR ALL TABLES when Tables is empty). Default: false.
	CreatePublication bool
	// Tables ("schema.table") the created publication covers.
	Tables []string
	// Slot is the logical replication slot name. Default: decant.
	Slot string
	// TopicPrefix starts every topic: <prefix>.raw.<schema>.<table>. Default: decant.
	TopicPrefix string
	// Partitions and ReplicationFactor of topics the streamer creates. Default: 6 and 1.
	Partitions        int
	ReplicationFactor int
	// Kafka are the client options (brokers, TLS, SASL). Required: at least kgo.SeedBrokers.
	Kafka []kgo.Opt
	// SnapshotMode is "initial" (snapshot every published table when the slot
	// is created) or "never" (stream changes only; an existing slot is adopted
	// as it is). Default: initial.
	SnapshotMode string
	// SnapshotChunkRows bounds one snapshot read. Default: 10000.
	SnapshotChunkRows int
	// StatusInterval is how often the confirmed LSN is reported to the server;
	// read-your-writes waits on it. Default: 200ms.
	StatusInterval time.Duration
	// HeartbeatInterval: when no WAL arrived for this long, the streamer writes a
	// tiny non-transactional logical message so an idle slot keeps advancing.
	// A negative value disables it. Default: 10s.
	HeartbeatInterval time.Duration
	// MaxInFlight bounds records produced but not yet acknowledged. Default:
	// 100000 (about 30 MB of typical rows). With 10000 the producer waited
	// for acknowledgements a third of the time (make bench-stream).
	MaxInFlight int
	// TakeoverPoll is how often a standby checks whether the slot is free. Default: 2s.
	TakeoverPoll time.Duration
	// SpoolDir holds the temporary files of transactions PostgreSQL streams
	// before they commit (PostgreSQL 14+, those larger than the server's
	// logical_decoding_work_mem). Default: the system temporary directory.
	SpoolDir string
	// Logger receives lifecycle and progress lines. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the streamer's metrics. Default: none.
	Registerer prometheus.Registerer
}

func (c *Config) defaults() {
	if c.Publication == "" {
		c.Publication = "decant"
	}
	if c.Slot == "" {
		c.Slot = "decant"
	}
	if c.TopicPrefix == "" {
		c.TopicPrefix = "decant"
	}
	if c.Partitions == 0 {
		c.Partitions = 6
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 1
	}
	if c.SnapshotMode == "" {
		c.SnapshotMode = "initial"
	}
	if c.SnapshotChunkRows == 0 {
		c.SnapshotChunkRows = 10000
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = 200 * time.Millisecond
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 100000
	}
	if c.TakeoverPoll == 0 {
		c.TakeoverPoll = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.DSN == "" {
		errs = append(errs, errors.New("streamer: DSN is required (postgres.dsn)"))
	}
	if !slotNameOK(c.Slot) {
		errs = append(errs, fmt.Errorf("streamer: slot name %q: use 1-63 lower-case letters, digits or _ (postgres.slot)", c.Slot))
	}
	if c.SnapshotMode != "initial" && c.SnapshotMode != "never" {
		errs = append(errs, fmt.Errorf("streamer: snapshot mode %q: use initial or never (streamer.snapshot_mode)", c.SnapshotMode))
	}
	if len(c.Kafka) == 0 {
		errs = append(errs, errors.New("streamer: Kafka client options are required (kafka.brokers)"))
	}
	if c.Partitions < 1 || c.ReplicationFactor < 1 {
		errs = append(errs, errors.New("streamer: partitions and replication factor must be at least 1"))
	}
	return errors.Join(errs...)
}

func slotNameOK(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}
