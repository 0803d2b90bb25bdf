package config

import (
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Config is the whole of decant.yaml. Every field has a default (see
// Default) and an environment variable (see package doc).
type Config struct {
	Postgres      Postgres      `yaml:"postgres"`
	Kafka         Kafka         `yaml:"kafka"`
	Elasticsearch Elasticsearch `yaml:"elasticsearch"`
	// OpenSearch is a second search sink, written like Elasticsearch
	// (same indexes, versions, aliases) from the same documents. Default:
	// off (no URLs). api_key does not apply: OpenSearch has no API keys.
	OpenSearch Elasticsearch `yaml:"opensearch"`
	// Mappings lists the mapping files (globs allowed), relative to the
	// config file. Default: ["mappings/*.yaml"].
	Mappings []string `yaml:"mappings"`
	HTTP     HTTP     `yaml:"http"`
	Log      Log      `yaml:"log"`
	Streamer Streamer `yaml:"streamer"`
	Resolver Resolver `yaml:"resolver"`
	Indexer  Indexer  `yaml:"indexer"`

	// Dir is the directory of the config file; relative paths resolve against it.
	Dir string `yaml:"-"`
}

// Postgres is the source database.
type Postgres struct {
	// DSN is a libpq URL or key=value string, sslmode included.
	// Default: postgres://postgres@127.0.0.1:5432/postgres.
	DSN string `yaml:"dsn"`
	// Publication streamed by the slot. Default: decant.
	Publication string `yaml:"publication"`
	// CreatePublication creates the publication (FOR the mapped tables) when it
	// is missing. Default: true.
	CreatePublication bool `yaml:"create_publication"`
	// Slot is the logical replication slot name. Default: decant.
	Slot string `yaml:"slot"`
	// BuildDSN, when set, is the database the build stage reads documents
	// from (and preview), e.g. the primary while DSN is a hot standby
	// that the streamer decodes: documents then reflect the primary, not
	// the standby's replay. Default: "" (DSN).
	BuildDSN string `yaml:"build_dsn"`
}

// Kafka is the broker cluster every stage talks through.
type Kafka struct {
	// Brokers are host:port seeds. Default: [127.0.0.1:9092].
	Brokers []string `yaml:"brokers"`
	// TopicPrefix starts every topic name: <prefix>.raw.…, <prefix>.refs.…. Default: decant.
	TopicPrefix string `yaml:"topic_prefix"`
	// Partitions for topics decant creates. Default: 6.
	Partitions int `yaml:"partitions"`
	// ReplicationFactor for topics decant creates. Default: 1.
	ReplicationFactor int `yaml:"replication_factor"`
	// MinInsyncReplicas is the min.insync.replicas of topics decant
	// creates: how many replicas must have a record before Kafka
	// acknowledges it (decant produces with acks=all). Default: 0, meaning
	// 2 when replication_factor is 2 or more (a record is on two brokers
	// before it counts), else 1.
	MinInsyncReplicas int `yaml:"min_insync_replicas"`
	// Compression of the record batches decant produces: none, lz4,
	// snappy, zstd or gzip. Default: none, as Kafka Connect's producers:
	// on a local network the CPU that compression costs the producer and
	// the broker (which decompresses to validate batches of compacted
	// topics) is scarcer than the bytes it saves.
	Compression string `yaml:"compression"`
	// TLS for broker connections. Default: off.
	TLS TLS `yaml:"tls"`
	// SASL authentication. Default: none.
	SASL SASL `yaml:"sasl"`
}

// SASL configures Kafka SASL authentication.
type SASL struct {
	// Mechanism: "", PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Default: "" (none).
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	// Password is a secret: never printed.
	Password string `yaml:"password"`
}

// TLS configures a TLS client.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// Elasticsearch is the search sink.
type Elasticsearch struct {
	// URLs of the nodes. Default: [http://127.0.0.1:9200]. Empty list
	// disables the Elasticsearch sink (aggregate topics only).
	URLs     []string `yaml:"urls"`
	Username string   `yaml:"username"`
	// Password is a secret: never printed.
	Password string `yaml:"password"`
	// APIKey (base64 id:key) is a secret: never printed.
	APIKey string `yaml:"api_key"`
	TLS    TLS    `yaml:"tls"`
}

// HTTP is the operations endpoint: /metrics, /healthz, /readyz, /v1/….
type HTTP struct {
	// Listen address. Default: 127.0.0.1:8080. Empty disables the server.
	Listen string `yaml:"listen"`
	// Token, when set, is the bearer token every route but /healthz
	// requires (Authorization: Bearer <token>). A secret: never printed;
	// set it from the environment (DECANT_HTTP_TOKEN). Default: none.
	Token string `yaml:"token"`
	// MaxWait caps a /v1/wait's ?timeout=. Default: 5m.
	MaxWait time.Duration `yaml:"max_wait"`
	// WaitRefreshInterval is the least time between two refreshes of the
	// search indexes that /v1/wait callers cause: concurrent waiters share
	// one. Default: 100ms.
	WaitRefreshInterval time.Duration `yaml:"wait_refresh_interval"`
}

// Log configures structured logging.
type Log struct {
	// Level: debug, info, warn, error. Default: info.
	Level string `yaml:"level"`
	// Format: text or json. Default: text.
	Format string `yaml:"format"`
}

// Streamer tunes the WAL → raw topics stage.
type Streamer struct {
	// SnapshotMode: initial (snapshot every published table when the slot is
	// created) or never (changes only). Default: initial.
	SnapshotMode string `yaml:"snapshot_mode"`
	// SlotFailover: create the slot with failover = true, so that
	// PostgreSQL 17+ synchronizes it to standbys (sync_replication_slots)
	// and decant continues from it on a promoted standby. auto: on when
	// the server is a 17+ primary; true: the same, and decant refuses a
	// server that cannot (older, or a standby); false: never. Default: auto.
	SlotFailover string `yaml:"slot_failover"`
	// SnapshotChunkRows is how many rows one snapshot query reads. Default: 10000.
	SnapshotChunkRows int `yaml:"snapshot_chunk_rows"`
	// StatusInterval is how often the slot position is confirmed. Default: 200ms.
	StatusInterval time.Duration `yaml:"status_interval"`
	// HeartbeatInterval writes a tiny logical message when the database is
	// idle so the slot keeps advancing; 0 or negative disables, here and in
	// streamer.Config. Default: 10s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// MaxInFlight bounds the raw records produced but not yet acknowledged. Default: 100000.
	MaxInFlight int `yaml:"max_in_flight"`
	// Redact keeps columns out of the raw topics, per table
	// ("schema.table"): excluded, masked (MaskText) or hashed (salted
	// SHA-256). Documents are built from PostgreSQL and keep them.
	Redact map[string]Redaction `yaml:"redact"`
	// MaskText replaces the value of a masked column. Default: "xxxxx".
	MaskText string `yaml:"mask_text"`
	// HashSaltEnv names the environment variable that holds the salt of
	// hashed columns (required when a column is hashed). Default:
	// DECANT_HASH_SALT.
	HashSaltEnv string `yaml:"hash_salt_env"`
	// HashSalt is the salt read from HashSaltEnv. A secret: never printed.
	HashSalt string `yaml:"-"`
}

// Redaction is what the streamer does to one table's columns before they
// reach its raw topic.
type Redaction struct {
	Exclude []string `yaml:"exclude"` // left out of before and after
	Mask    []string `yaml:"mask"`    // replaced by streamer.mask_text (null stays null)
	Hash    []string `yaml:"hash"`    // replaced by "sha256:<hex of SHA-256(salt || the value's JSON)>" (null stays null)
}

// Resolver tunes the map and build stages.
type Resolver struct {
	// BatchSize is how many changes (map) or ids (build) one SQL statement handles. Default: 500.
	BatchSize int `yaml:"batch_size"`
	// MaxInFlightBytes bounds the bytes of the documents the build stage
	// has in flight (polled, not yet written): with large documents it
	// polls fewer ids at a time. Its memory grows by about ten times this.
	// Default: 67108864 (64 MiB).
	MaxInFlightBytes int `yaml:"max_in_flight_bytes"`
	// Group is the consumer group prefix. Default: the topic prefix.
	Group string `yaml:"group"`
	// SessionTimeout of the map and build stages' consumer group members:
	// a member not heard from for this long (killed, paused, cut off) loses
	// its partitions to the others. Default: 45s (Kafka's).
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// Fence makes the build stage write the aggregate topics in Kafka
	// transactions, one transactional writer per refs partition, so that a
	// member that lost its partitions (paused, evicted during a long
	// retry) cannot append an older document after its successor, and
	// stops its Elasticsearch writes once it may have lost them. Consumers
	// of the aggregate topics should read with isolation.level
	// read_committed. Default: true.
	Fence bool `yaml:"fence"`
}

// Indexer tunes the sinks.
type Indexer struct {
	// BulkActions per Elasticsearch bulk request (requests are also capped at BulkBytes). Default: 10000.
	BulkActions int `yaml:"bulk_actions"`
	// BulkBytes caps one bulk request's body. Default: 5242880 (5 MiB).
	BulkBytes int `yaml:"bulk_bytes"`
	// BulkRequests is how many bulk requests one search sink has in
	// flight at most; writes waiting for one share the next. Default: 4.
	BulkRequests int `yaml:"bulk_requests"`
	// BulkLoadSettings creates the index of a first start's initial load
	// and of a reindex with refresh off and no replicas, and restores the
	// mapping's values once the load is done (the bulk-load practice
	// Elasticsearch documents). Default: true.
	BulkLoadSettings bool `yaml:"bulk_load_settings"`
	// AutoReindex applies a mapping change that changes an aggregate's
	// index on start: the build stage reindexes that aggregate (new
	// concrete index, dual writes, backfill, alias swap) while the others
	// keep serving. false: decant refuses to start until `decant backfill
	// <aggregate> --reindex` has run. Default: true.
	AutoReindex bool `yaml:"auto_reindex"`
}

// Default returns the configuration used for every key the file leaves out.
func Default() Config {
	return Config{
		Postgres: Postgres{DSN: "postgres://postgres@127.0.0.1:5432/postgres", Publication: "decant", CreatePublication: true, Slot: "decant"},
		Kafka:    Kafka{Brokers: []string{"127.0.0.1:9092"}, TopicPrefix: "decant", Partitions: 6, ReplicationFactor: 1, Compression: "none"},
		Elasticsearch: Elasticsearch{
			URLs: []string{"http://127.0.0.1:9200"},
		},
		Mappings: []string{"mappings/*.yaml"},
		HTTP:     HTTP{Listen: "127.0.0.1:8080", MaxWait: 5 * time.Minute, WaitRefreshInterval: 100 * time.Millisecond},
		Log:      Log{Level: "info", Format: "text"},
		Streamer: Streamer{SnapshotMode: "initial", SlotFailover: "auto", SnapshotChunkRows: 10000, StatusInterval: 200 * time.Millisecond, HeartbeatInterval: 10 * time.Second, MaxInFlight: 100000,
			MaskText: "xxxxx", HashSaltEnv: "DECANT_HASH_SALT"},
		Resolver: Resolver{BatchSize: 500, MaxInFlightBytes: 64 << 20, SessionTimeout: 45 * time.Second, Fence: true},
		Indexer:  Indexer{BulkActions: 10000, BulkBytes: 5 << 20, BulkRequests: 4, BulkLoadSettings: true, AutoReindex: true},
	}
}

// Redacted returns a copy safe to print: passwords and DSN secrets replaced.
func (c Config) Redacted() Config {
	r := c
	r.Postgres.DSN = RedactDSN(c.Postgres.DSN)
	r.Postgres.BuildDSN = RedactDSN(c.Postgres.BuildDSN)
	if r.Kafka.SASL.Password != "" {
		r.Kafka.SASL.Password = "xxxxx"
	}
	if r.Elasticsearch.Password != "" {
		r.Elasticsearch.Password = "xxxxx"
	}
	if r.Elasticsearch.APIKey != "" {
		r.Elasticsearch.APIKey = "xxxxx"
	}
	if r.OpenSearch.Password != "" {
		r.OpenSearch.Password = "xxxxx"
	}
	if r.OpenSearch.APIKey != "" {
		r.OpenSearch.APIKey = "xxxxx"
	}
	if r.HTTP.Token != "" {
		r.HTTP.Token = "xxxxx"
	}
	if r.Streamer.HashSalt != "" {
		r.Streamer.HashSalt = "xxxxx"
	}
	r.Elasticsearch.URLs = RedactURLs(c.Elasticsearch.URLs)
	r.OpenSearch.URLs = RedactURLs(c.OpenSearch.URLs)
	return r
}

// OrDefault sets *v to def when *v is the zero value: the stages fill the
// unset fields of their Config structs from Default with it.
func OrDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// RedactDSN hides the password of a URL or key=value DSN.
func RedactDSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "<unparseable dsn>"
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return redactKeywordDSN(dsn)
}

// redactKeywordDSN redacts the password of a libpq keyword/value
// connection string (host=db password='a secret' …): values may be
// single-quoted with spaces inside, quotes and backslashes escaped by a
// backslash, and spaces may surround the '='. What cannot be parsed is
// not printed at all.
func redactKeywordDSN(dsn string) string {
	var out []string
	rest := strings.TrimLeft(dsn, " \t\n\r\f\v")
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq < 0 {
			return "<unparseable dsn>"
		}
		key := strings.TrimSpace(rest[:eq])
		if key == "" || strings.ContainsAny(key, " \t\n\r\f\v") {
			return "<unparseable dsn>"
		}
		rest = strings.TrimLeft(rest[eq+1:], " \t\n\r\f\v")
		var val strings.Builder
		quoted := strings.HasPrefix(rest, "'")
		i := 0
		if quoted {
			i = 1
		}
		closed := !quoted
		for ; i < len(rest); i++ {
			c := rest[i]
			if c == '\\' && i+1 < len(rest) {
				i++
				val.WriteByte(rest[i])
				continue
			}
			if quoted && c == '\'' {
				closed = true
				i++
				break
			}
			if !quoted && strings.IndexByte(" \t\n\r\f\v", c) >= 0 {
				break
			}
			val.WriteByte(c)
		}
		if !closed {
			return "<unparseable dsn>"
		}
		rest = strings.TrimLeft(rest[i:], " \t\n\r\f\v")
		v := val.String()
		if key == "password" {
			v = "xxxxx"
		}
		if v == "" || strings.ContainsAny(v, " \t\n\r\f\v'\\") {
			v = "'" + strings.NewReplacer("\\", "\\\\", "'", "\\'").Replace(v) + "'"
		}
		out = append(out, key+"="+v)
	}
	return strings.Join(out, " ")
}

// RedactURL returns a search engine URL with its password (user:pass@)
// replaced by xxxxx, for logs and messages.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<unparseable url>"
	}
	return u.Redacted()
}

// RedactURLs is RedactURL of each.
func RedactURLs(urls []string) []string {
	out := make([]string, len(urls))
	for i, s := range urls {
		out[i] = RedactURL(s)
	}
	return out
}

// validate checks values after defaults and env overrides. Errors name the
// key and the fix.
func (c *Config) validate() []*Error {
	var errs []*Error
	bad := func(key, format string, a ...any) {
		errs = append(errs, &Error{Key: key, Msg: fmt.Sprintf(format, a...)})
	}
	if c.Postgres.DSN == "" {
		bad("postgres.dsn", "must be set, e.g. postgres://decant@db:5432/shop (or DECANT_POSTGRES_DSN)")
	}
	if !ValidSlotName(c.Postgres.Slot) {
		bad("postgres.slot", "%q is not a valid slot name: use lower-case letters, digits and _", c.Postgres.Slot)
	}
	if c.Postgres.Publication == "" {
		bad("postgres.publication", "must be set, e.g. decant")
	}
	if len(c.Kafka.Brokers) == 0 {
		bad("kafka.brokers", "needs at least one host:port (or DECANT_KAFKA_BROKERS=host:9092)")
	}
	for _, b := range c.Kafka.Brokers {
		if !strings.Contains(b, ":") {
			bad("kafka.brokers", "%q has no port: write host:port", b)
		}
	}
	if c.Kafka.TopicPrefix == "" || strings.ContainsAny(c.Kafka.TopicPrefix, " /\\") {
		bad("kafka.topic_prefix", "%q is not a valid topic prefix: use letters, digits, '.', '_' or '-'", c.Kafka.TopicPrefix)
	}
	if c.Kafka.Partitions < 1 {
		bad("kafka.partitions", "must be at least 1, got %d", c.Kafka.Partitions)
	}
	if c.Kafka.ReplicationFactor < 1 {
		bad("kafka.replication_factor", "must be at least 1, got %d", c.Kafka.ReplicationFactor)
	}
	if c.Kafka.MinInsyncReplicas < 0 || c.Kafka.MinInsyncReplicas > c.Kafka.ReplicationFactor {
		bad("kafka.min_insync_replicas", "must be between 1 and kafka.replication_factor (%d), or 0 for the default, got %d", c.Kafka.ReplicationFactor, c.Kafka.MinInsyncReplicas)
	}
	switch c.Kafka.Compression {
	case "none", "lz4", "snappy", "zstd", "gzip":
	default:
		bad("kafka.compression", "%q is not supported: use none, lz4, snappy, zstd or gzip", c.Kafka.Compression)
	}
	switch c.Kafka.SASL.Mechanism {
	case "", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		bad("kafka.sasl.mechanism", "%q is not supported: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.Kafka.SASL.Mechanism)
	}
	for _, u := range c.Elasticsearch.URLs {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			bad("elasticsearch.urls", "%q is not an http(s) URL, e.g. http://127.0.0.1:9200", u)
		}
	}
	for _, u := range c.OpenSearch.URLs {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			bad("opensearch.urls", "%q is not an http(s) URL, e.g. http://127.0.0.1:9200", u)
		}
	}
	if c.OpenSearch.APIKey != "" {
		bad("opensearch.api_key", "OpenSearch has no API keys: use opensearch.username and opensearch.password")
	}
	if len(c.Mappings) == 0 {
		bad("mappings", "needs at least one mapping file or glob, e.g. [mappings/*.yaml]")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q: use debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", "%q: use text or json", c.Log.Format)
	}
	if c.Streamer.SnapshotMode != "initial" && c.Streamer.SnapshotMode != "never" {
		bad("streamer.snapshot_mode", "%q: use initial or never", c.Streamer.SnapshotMode)
	}
	switch c.Streamer.SlotFailover {
	case "auto", "true", "false":
	default:
		bad("streamer.slot_failover", "%q: use auto (failover slots on PostgreSQL 17+ primaries), true or false", c.Streamer.SlotFailover)
	}
	if c.Streamer.SnapshotChunkRows < 1 {
		bad("streamer.snapshot_chunk_rows", "must be at least 1")
	}
	if c.Streamer.StatusInterval <= 0 {
		bad("streamer.status_interval", "must be positive, e.g. 1s")
	}
	if c.Streamer.MaxInFlight < 1 {
		bad("streamer.max_in_flight", "must be at least 1")
	}
	if c.Resolver.BatchSize < 1 {
		bad("resolver.batch_size", "must be at least 1")
	}
	if c.Resolver.MaxInFlightBytes < 1<<20 {
		bad("resolver.max_in_flight_bytes", "must be at least 1048576 (1 MiB), e.g. 67108864")
	}
	if c.Resolver.SessionTimeout < 6*time.Second || c.Resolver.SessionTimeout > 30*time.Minute {
		bad("resolver.session_timeout", "must be between 6s and 30m (Kafka's group.min/max.session.timeout.ms bound it too), e.g. 45s")
	}
	c.validateRedact(bad)
	if c.HTTP.MaxWait <= 0 {
		bad("http.max_wait", "must be positive, e.g. 5m")
	}
	if c.HTTP.WaitRefreshInterval < 0 {
		bad("http.wait_refresh_interval", "must not be negative, e.g. 100ms")
	}
	if c.Indexer.BulkActions < 1 {
		bad("indexer.bulk_actions", "must be at least 1")
	}
	if c.Indexer.BulkBytes < 1<<10 {
		bad("indexer.bulk_bytes", "must be at least 1024 (bytes; the default is 5242880, 5 MiB)")
	}
	if c.Indexer.BulkRequests < 1 {
		bad("indexer.bulk_requests", "must be at least 1")
	}
	return errs
}

// ValidSlotName is PostgreSQL's rule for replication slot names: 1-63
// lower-case letters, digits or _.
func ValidSlotName(s string) bool {
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

// Snapshots reports whether the streamer snapshots every published table
// when it creates the slot (snapshot_mode initial).
func (s Streamer) Snapshots() bool { return s.SnapshotMode != "never" }

// ResolverGroup is the consumer group prefix of the map and build stages:
// resolver.group, or the topic prefix when it is empty.
func (c *Config) ResolverGroup() string {
	if c.Resolver.Group != "" {
		return c.Resolver.Group
	}
	return c.Kafka.TopicPrefix
}

// MappingPaths expands Mappings (globs relative to the config file) into
// sorted, distinct paths; a pattern that matches no file is an error.
func (c *Config) MappingPaths() ([]string, error) {
	seen := map[string]bool{}
	var paths []string
	for _, pattern := range c.Mappings {
		p := pattern
		if !filepath.IsAbs(p) {
			p = filepath.Join(c.Dir, p)
		}
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("mappings: %q: %w", pattern, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("mappings: %q matches no file (relative to %s)", pattern, c.Dir)
		}
		sort.Strings(matches)
		for _, m := range matches {
			if !seen[m] {
				seen[m] = true
				paths = append(paths, m)
			}
		}
	}
	return paths, nil
}

// MinInsync is the min.insync.replicas of the topics decant creates:
// MinInsyncReplicas when set, else 2 when ReplicationFactor is 2 or more,
// else 1.
func (k Kafka) MinInsync() int {
	switch {
	case k.MinInsyncReplicas > 0:
		return k.MinInsyncReplicas
	case k.ReplicationFactor >= 2:
		return 2
	}
	return 1
}

// validateRedact checks streamer.redact: tables named schema.table, each
// column in one list at most, and a salt when a column is hashed.
func (c *Config) validateRedact(bad func(key, format string, a ...any)) {
	tables := make([]string, 0, len(c.Streamer.Redact))
	for t := range c.Streamer.Redact {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		r := c.Streamer.Redact[t]
		key := "streamer.redact." + t
		if schema, name, ok := strings.Cut(t, "."); !ok || schema == "" || name == "" || strings.Contains(name, ".") {
			bad(key, "name the table as schema.table, e.g. public.customers")
		}
		seen := map[string]string{}
		for _, l := range []struct {
			what string
			cols []string
		}{{"exclude", r.Exclude}, {"mask", r.Mask}, {"hash", r.Hash}} {
			for _, col := range l.cols {
				if col == "" {
					bad(key+"."+l.what, "a column name is empty")
					continue
				}
				if prev, ok := seen[col]; ok {
					bad(key+"."+l.what, "column %q is also in %s: keep it in one list", col, prev)
					continue
				}
				seen[col] = l.what
			}
		}
		if len(r.Hash) > 0 && c.Streamer.HashSalt == "" {
			bad(key+".hash", "hashing needs a salt: set the environment variable %s (streamer.hash_salt_env) to a long random secret", c.Streamer.HashSaltEnv)
		}
	}
}
