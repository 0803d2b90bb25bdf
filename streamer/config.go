package streamer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
)

// Config configures a Streamer. Zero values take the defaults shown, which
// are decant.yaml's (config.Default).
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
	// MinInsyncReplicas of the topics the streamer creates. Default: 0
	// (the broker's default).
	MinInsyncReplicas int
	// Kafka are the client options (brokers, TLS, SASL). Required: at least kgo.SeedBrokers.
	Kafka []kgo.Opt
	// SnapshotMode is "initial" (snapshot every published table when the slot
	// is created) or "never" (stream changes only; an existing slot is adopted
	// as it is). Default: initial.
	SnapshotMode string
	// SlotFailover is "auto" (create the slot with failover = true when
	// the server is a PostgreSQL 17+ primary, so standbys with
	// sync_replication_slots keep a copy decant continues from after a
	// promotion), "true" (the same, and a server that cannot is refused)
	// or "false". An existing slot without the option gets it (auto,
	// true). Default: auto.
	SlotFailover string
	// SnapshotChunkRows bounds one snapshot read. Default: 10000.
	SnapshotChunkRows int
	// StatusInterval is how often the confirmed LSN is reported to the server;
	// read-your-writes waits on it. Default: 200ms.
	StatusInterval time.Duration
	// HeartbeatInterval: when no WAL arrived for this long, the streamer writes a
	// tiny non-transactional logical message so an idle slot keeps advancing.
	// Zero or a negative value disables it, as in decant.yaml; set it from
	// config.Default().Streamer.HeartbeatInterval (10s) to have it.
	HeartbeatInterval time.Duration
	// MaxInFlight bounds records produced but not yet acknowledged. Default:
	// 100000 (about 30 MB of typical rows). With 10000 the producer waited
	// for acknowledgements a third of the time (make bench-stream).
	MaxInFlight int
	// TakeoverPoll is how often a standby checks whether the slot is free. Default: 2s.
	TakeoverPoll time.Duration
	// TablePoll is how often the streamer looks for requested online
	// table snapshots (`decant snapshot`). Default: 2s.
	TablePoll time.Duration
	// SpoolDir holds the temporary files of transactions PostgreSQL streams
	// before they commit (PostgreSQL 14+, those larger than the server's
	// logical_decoding_work_mem). Default: the system temporary directory.
	SpoolDir string
	// Redact keeps columns out of the raw topics, per table ("schema.table";
	// config.Streamer.Redact): excluded, masked with MaskText, or hashed
	// with HashSalt. Default: none.
	Redact   map[string]config.Redaction
	MaskText string
	HashSalt string
	// Logger receives lifecycle and progress lines. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the streamer's metrics. Default: none.
	Registerer prometheus.Registerer
}

func (c *Config) defaults() {
	d := config.Default()
	config.OrDefault(&c.Publication, d.Postgres.Publication)
	config.OrDefault(&c.Slot, d.Postgres.Slot)
	config.OrDefault(&c.TopicPrefix, d.Kafka.TopicPrefix)
	config.OrDefault(&c.Partitions, d.Kafka.Partitions)
	config.OrDefault(&c.ReplicationFactor, d.Kafka.ReplicationFactor)
	config.OrDefault(&c.SnapshotMode, d.Streamer.SnapshotMode)
	config.OrDefault(&c.SlotFailover, d.Streamer.SlotFailover)
	config.OrDefault(&c.SnapshotChunkRows, d.Streamer.SnapshotChunkRows)
	config.OrDefault(&c.StatusInterval, d.Streamer.StatusInterval)
	config.OrDefault(&c.MaxInFlight, d.Streamer.MaxInFlight)
	config.OrDefault(&c.TakeoverPoll, 2*time.Second)
	config.OrDefault(&c.TablePoll, 2*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ConfigFrom maps decant.yaml onto the streamer: every value comes
// already defaulted from cfg. tables ("schema.table") are what a created
// publication covers; kopts are cfg.Kafka.ClientOptions().
func ConfigFrom(cfg *config.Config, tables []string, kopts []kgo.Opt, log *slog.Logger, reg prometheus.Registerer) Config {
	return Config{
		DSN: cfg.Postgres.DSN, Publication: cfg.Postgres.Publication, CreatePublication: cfg.Postgres.CreatePublication,
		Tables: tables, Slot: cfg.Postgres.Slot, TopicPrefix: cfg.Kafka.TopicPrefix, Partitions: cfg.Kafka.Partitions,
		ReplicationFactor: cfg.Kafka.ReplicationFactor, MinInsyncReplicas: cfg.Kafka.MinInsync(), Kafka: kopts,
		SnapshotMode: cfg.Streamer.SnapshotMode, SlotFailover: cfg.Streamer.SlotFailover, SnapshotChunkRows: cfg.Streamer.SnapshotChunkRows, StatusInterval: cfg.Streamer.StatusInterval,
		HeartbeatInterval: cfg.Streamer.HeartbeatInterval, MaxInFlight: cfg.Streamer.MaxInFlight,
		Redact: cfg.Streamer.Redact, MaskText: cfg.Streamer.MaskText, HashSalt: cfg.Streamer.HashSalt,
		Logger: log, Registerer: reg,
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.DSN == "" {
		errs = append(errs, errors.New("streamer: DSN is required (postgres.dsn)"))
	}
	if !config.ValidSlotName(c.Slot) {
		errs = append(errs, fmt.Errorf("streamer: slot name %q: use 1-63 lower-case letters, digits or _ (postgres.slot)", c.Slot))
	}
	if c.SnapshotMode != "initial" && c.SnapshotMode != "never" {
		errs = append(errs, fmt.Errorf("streamer: snapshot mode %q: use initial or never (streamer.snapshot_mode)", c.SnapshotMode))
	}
	switch c.SlotFailover {
	case "auto", "true", "false":
	default:
		errs = append(errs, fmt.Errorf("streamer: slot failover %q: use auto, true or false (streamer.slot_failover)", c.SlotFailover))
	}
	if len(c.Kafka) == 0 {
		errs = append(errs, errors.New("streamer: Kafka client options are required (kafka.brokers)"))
	}
	if c.Partitions < 1 || c.ReplicationFactor < 1 {
		errs = append(errs, errors.New("streamer: partitions and replication factor must be at least 1"))
	}
	return errors.Join(errs...)
}
