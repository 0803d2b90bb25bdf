package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "decant.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadAppliesFileDefaultsAndEnv(t *testing.T) {
	p := writeFile(t, `
postgres:
  dsn: postgres://decant:secret@db:5432/shop
kafka:
  brokers: [k1:9092, k2:9092]
  partitions: 3
streamer:
  heartbeat_interval: 30s
`)
	if cfg, err := Load(p, nil); err != nil || !cfg.Indexer.BulkLoadSettings {
		t.Errorf("indexer.bulk_load_settings defaults to %v (%v), want true", cfg != nil && cfg.Indexer.BulkLoadSettings, err)
	}
	cfg, err := Load(p, []string{"DECANT_KAFKA_TOPIC_PREFIX=shop", "DECANT_ELASTICSEARCH_URLS=http://es1:9200, http://es2:9200", "HOME=/root",
		"DECANT_INDEXER_BULK_LOAD_SETTINGS=false"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Indexer.BulkLoadSettings {
		t.Error("DECANT_INDEXER_BULK_LOAD_SETTINGS=false did not turn bulk-load settings off")
	}
	if cfg.Postgres.DSN != "postgres://decant:secret@db:5432/shop" || cfg.Postgres.Slot != "decant" {
		t.Errorf("postgres = %+v", cfg.Postgres)
	}
	if strings.Join(cfg.Kafka.Brokers, ",") != "k1:9092,k2:9092" || cfg.Kafka.Partitions != 3 || cfg.Kafka.TopicPrefix != "shop" {
		t.Errorf("kafka = %+v", cfg.Kafka)
	}
	if strings.Join(cfg.Elasticsearch.URLs, ",") != "http://es1:9200,http://es2:9200" {
		t.Errorf("elasticsearch.urls from env = %v", cfg.Elasticsearch.URLs)
	}
	if cfg.Streamer.HeartbeatInterval != 30*time.Second || cfg.Streamer.StatusInterval != 200*time.Millisecond {
		t.Errorf("streamer = %+v", cfg.Streamer)
	}
	if cfg.Dir != filepath.Dir(p) {
		t.Errorf("Dir = %q", cfg.Dir)
	}
}

// Every problem is reported at once, each with file:line:column, the key
// and what to do.
func TestLoadErrorsHavePositions(t *testing.T) {
	p := writeFile(t, `postgres:
  dsn: postgres://db/shop
  slott: x
kafka:
  brokers: [nohost]
  partitions: many
streamer:
  status_interval: soon
log:
  level: loud
`)
	_, err := Load(p, nil)
	if err == nil {
		t.Fatal("want errors")
	}
	msg := err.Error()
	for _, want := range []string{
		p + `:3:3: postgres.slott: unknown key; did you mean "slot"?`,
		p + `:6:15: kafka.partitions: "many" is not a whole number`,
		p + `:8:20: streamer.status_interval: "soon" is not a duration`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors lack %q:\n%s", want, msg)
		}
	}
	// Value errors found by validation point at the value too.
	p2 := writeFile(t, "kafka:\n  brokers: [nohost]\n  compression: brotli\nlog:\n  level: loud\nindexer:\n  bulk_bytes: 10\n  bulk_requests: 0\n")
	_, err = Load(p2, nil)
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		p2 + `:2:12: kafka.brokers: "nohost" has no port: write host:port`,
		p2 + `:3:16: kafka.compression: "brotli" is not supported: use none, lz4, snappy, zstd or gzip`,
		p2 + `:5:10: log.level: "loud": use debug, info, warn or error`,
		p2 + `:7:15: indexer.bulk_bytes: must be at least 1024 (bytes; the default is 5242880, 5 MiB)`,
		p2 + `:8:18: indexer.bulk_requests: must be at least 1`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%s", want, err)
		}
	}
}

func TestLoadEnvErrors(t *testing.T) {
	_, err := Load("", []string{"DECANT_KAFKA_PARTITIONS=zero", "DECANT_POSTGRES_SLUT=x"})
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		`DECANT_KAFKA_PARTITIONS (kafka.partitions): "zero" is not a whole number`,
		`DECANT_POSTGRES_SLUT: unknown variable; did you mean "DECANT_POSTGRES_SLOT"?`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%s", want, err)
		}
	}
}

func TestWrongShapes(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"kafka: [a]", `kafka: want a mapping (key: value lines), got a list`},
		{"kafka:\n  brokers: k1:9092", `kafka.brokers: want a list, e.g. [a, b], got "k1:9092"`},
		{"postgres:\n  create_publication: maybe", `postgres.create_publication: "maybe" is not a boolean`},
		{"postgres:\n  dsn: a\n  dsn: b", `postgres.dsn: duplicate key`},
		{"mappings: []", `mappings: needs at least one mapping file`},
		{"streamer:\n  slot_failover: yes", `streamer.slot_failover: "yes": use auto (failover slots on PostgreSQL 17+ primaries), true or false`},
	} {
		_, err := Load(writeFile(t, c.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to contain %q", c.yaml, err, c.want)
		}
	}
}

func TestRedacted(t *testing.T) {
	cfg := Default()
	cfg.Postgres.DSN = "postgres://decant:hunter2@db/shop?sslmode=require"
	cfg.Kafka.SASL.Password = "kpass"
	cfg.Elasticsearch.Password = "espass"
	cfg.Elasticsearch.APIKey = "key"
	r := cfg.Redacted()
	for _, secret := range []string{"hunter2", "kpass", "espass"} {
		for _, v := range []string{r.Postgres.DSN, r.Kafka.SASL.Password, r.Elasticsearch.Password, r.Elasticsearch.APIKey} {
			if strings.Contains(v, secret) {
				t.Errorf("redacted config still holds %q", secret)
			}
		}
	}
	if got := RedactDSN("host=db user=decant password=hunter2 dbname=shop"); strings.Contains(got, "hunter2") || !strings.Contains(got, "password=xxxxx") {
		t.Errorf("RedactDSN(key=value) = %q", got)
	}
	if cfg.Postgres.DSN != "postgres://decant:hunter2@db/shop?sslmode=require" {
		t.Error("Redacted changed the original")
	}
	cfg.Elasticsearch.URLs = []string{"https://elastic:es%20secret@es1:9200", "http://es2:9200"}
	cfg.OpenSearch.URLs = []string{"https://admin:ossecret@os1:9200"}
	r = cfg.Redacted()
	if got := strings.Join(append(r.Elasticsearch.URLs, r.OpenSearch.URLs...), " "); strings.Contains(got, "secret") ||
		got != "https://elastic:xxxxx@es1:9200 http://es2:9200 https://admin:xxxxx@os1:9200" {
		t.Errorf("redacted search URLs = %q", got)
	}
}

// TestRedactDSN: no form of password in a DSN is printed: URL user info
// and query, keyword/value pairs with quoted values holding spaces,
// escaped quotes and spaces around '='; a DSN that cannot be parsed is
// not printed at all.
func TestRedactDSN(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		{"postgres://decant:hunter2@db/shop?sslmode=require", "postgres://decant:xxxxx@db/shop?sslmode=require"},
		{"postgres://decant@db/shop?password=hunter2", "postgres://decant@db/shop?password=xxxxx"},
		{"host=db user=decant password=hunter2 dbname=shop", "host=db user=decant password=xxxxx dbname=shop"},
		{"host=db password='correct horse battery' dbname=shop", "host=db password=xxxxx dbname=shop"},
		{"host = db password = 'it\\'s a secret' dbname='my shop'", "host=db password=xxxxx dbname='my shop'"},
		{"password=hunter\\ 2 host=db", "password=xxxxx host=db"},
		{"host=db password='never closed secret", "<unparseable dsn>"},
		{"host=db hunter2", "<unparseable dsn>"},
	} {
		got := RedactDSN(c.dsn)
		if got != c.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", c.dsn, got, c.want)
		}
		for _, secret := range []string{"hunter", "horse", "secret"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactDSN(%q) = %q prints the password", c.dsn, got)
			}
		}
	}
}

func TestMinInsyncReplicas(t *testing.T) {
	for _, c := range []struct{ rf, set, want int }{{1, 0, 1}, {2, 0, 2}, {3, 0, 2}, {3, 3, 3}, {3, 1, 1}} {
		if got := (Kafka{ReplicationFactor: c.rf, MinInsyncReplicas: c.set}).MinInsync(); got != c.want {
			t.Errorf("replication_factor %d, min_insync_replicas %d: MinInsync() = %d, want %d", c.rf, c.set, got, c.want)
		}
	}
	p := writeFile(t, "kafka:\n  replication_factor: 2\n  min_insync_replicas: 3\n")
	_, err := Load(p, nil)
	if want := p + `:3:24: kafka.min_insync_replicas: must be between 1 and kafka.replication_factor (2), or 0 for the default, got 3`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want %q", err, want)
	}
}
