package binary

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// tlsServers is how one decant.yaml reaches the three servers over TLS:
// PostgreSQL with sslmode=verify-full, Kafka's SASL_SSL listener with
// SCRAM-SHA-512, and the search engine through https.
type tlsServers struct {
	pgDSN                          string
	brokers                        []string
	kafkaCA, kafkaUser, kafkaPass  string
	esURL, esCA, esUser, esPass    string
	slot, topicPrefix, httpAddress string
}

func (s tlsServers) yaml() string {
	return fmt.Sprintf(`postgres:
  dsn: %q
  publication: decant
  slot: %s
kafka:
  brokers: [%s]
  topic_prefix: %s
  partitions: 2
  tls: {enabled: true, ca_file: %q}
  sasl: {mechanism: SCRAM-SHA-512, username: %q, password: %q}
elasticsearch:
  urls: [%q]
  username: %q
  password: %q
  tls: {enabled: true, ca_file: %q}
mappings: [mappings/*.yaml]
http:
  listen: %q
`, s.pgDSN, s.slot, strings.Join(s.brokers, ","), s.topicPrefix, s.kafkaCA, s.kafkaUser, s.kafkaPass,
		s.esURL, s.esUser, s.esPass, s.esCA, s.httpAddress)
}

// Secrets of the TLS tests: none may appear in decant's output.
const (
	tlsKafkaPass = "kafka-scram-secret"
	tlsESPass    = "es-proxy-secret"
	tlsPGPass    = "right-secret"
)

// newTLSPipeline is the items pipeline with a config that reaches every
// server over TLS (see tlsServers): the SCRAM user exists on the broker,
// an https proxy with the test CA's certificate and basic auth stands in
// front of Elasticsearch.
func newTLSPipeline(t *testing.T) (*testenv.Pipeline, *testenv.TestCA, tlsServers) {
	t.Helper()
	ca := testenv.CA(t)
	testenv.CheckSASLListener(t)
	p := newPipeline(t)
	p.PG.RequireSSL(t)
	user := "decant-" + testenv.Suffix()
	p.Kafka.SCRAMUser(t, user, tlsKafkaPass)
	s := tlsServers{
		pgDSN:   strings.Replace(p.PG.DSN, "sslmode=disable", "sslmode=verify-full&sslrootcert="+ca.CAFile, 1),
		brokers: testenv.KafkaSASLBrokers(), kafkaCA: ca.CAFile, kafkaUser: user, kafkaPass: tlsKafkaPass,
		esURL: ca.TLSProxy(t, p.ES.URL, "elastic", tlsESPass), esCA: ca.CAFile, esUser: "elastic", esPass: tlsESPass,
		slot: p.Slot, topicPrefix: p.Kafka.Prefix,
	}
	if !strings.Contains(s.pgDSN, "verify-full") {
		t.Fatalf("test DSN %s has no sslmode=disable to replace", p.PG.DSN)
	}
	p.Write("decant.yaml", s.yaml())
	return p, ca, s
}

// TestTLSRunEndToEnd: `decant run` against PostgreSQL with
// sslmode=verify-full, Kafka's SASL_SSL listener (SCRAM-SHA-512) and
// Elasticsearch over https, all three checked against the test CA, builds
// the documents the oracle expects, from the snapshot and from changes.
func TestTLSRunEndToEnd(t *testing.T) {
	p, _, _ := newTLSPipeline(t)
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'before ' || g, 1 + g % 2 FROM generate_series(1, 200) g`)
	p.Start("run", nil, "run")
	p.WaitConverged(2 * time.Minute)
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'after ' || g, 1 + g % 2 FROM generate_series(201, 300) g`)
	p.PG.Exec(t, `UPDATE categories SET title = 'TOOLS' WHERE id = 1`)
	p.PG.Exec(t, `DELETE FROM items WHERE id <= 20`)
	p.WaitConverged(2 * time.Minute)
	// The connections were TLS: decant's own PostgreSQL sessions say so.
	var tlsSessions, plain int
	if err := p.PG.Pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		WHERE a.datname = $1 AND a.application_name LIKE 'decant%'`, p.PG.Name).Scan(&tlsSessions, &plain); err != nil {
		t.Fatal(err)
	}
	if tlsSessions == 0 || plain != 0 {
		t.Errorf("decant's PostgreSQL sessions: %d over TLS, %d plain; want some, all TLS", tlsSessions, plain)
	}
}

// TestTLSFailures: a wrong CA, a wrong password and a plain-text port
// make `decant run` exit 2 with a message naming the key to check, for
// each of PostgreSQL, Kafka and Elasticsearch, and never print a secret.
func TestTLSFailures(t *testing.T) {
	p, ca, good := newTLSPipeline(t)
	// A role that must authenticate (pg_hba: scram for decant_pw), for the wrong-password case.
	_, _ = p.PG.Pool.Exec(context.Background(), `DO $$ BEGIN CREATE ROLE decant_pw LOGIN PASSWORD 'right-secret'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
	other := testenv.OtherCA(t)
	plainPG := testenv.PlainPG(t)
	for _, c := range []struct {
		name   string
		change func(s *tlsServers)
		want   string // regexp the output must match
	}{
		{"postgres wrong CA", func(s *tlsServers) { s.pgDSN = strings.Replace(s.pgDSN, ca.CAFile, other, 1) },
			`connecting to PostgreSQL at .*certificate signed by unknown authority \(check postgres\.dsn: sslrootcert must name`},
		{"postgres wrong password", func(s *tlsServers) {
			s.pgDSN = strings.Replace(s.pgDSN, "postgres://postgres@", "postgres://decant_pw:wrong-secret@", 1)
		}, `connecting to PostgreSQL at postgres://decant_pw:xxxxx@.*password authentication failed for user "decant_pw".*\(check postgres\.dsn: user and password\)`},
		{"postgres plain-text server", func(s *tlsServers) { s.pgDSN = strings.Replace(s.pgDSN, "127.0.0.1:"+pgPort(t, s.pgDSN), plainPG, 1) },
			`connecting to PostgreSQL at .*server refused TLS connection \(check postgres\.dsn: the server does not offer TLS`},
		{"kafka wrong CA", func(s *tlsServers) { s.kafkaCA = other },
			`kafka at \[.*\] is not reachable: .*certificate signed by unknown authority \(check kafka\.tls\.ca_file: it must hold the CA`},
		{"kafka wrong password", func(s *tlsServers) { s.kafkaPass = "wrong-kafka-secret" },
			`kafka at \[.*\] refused the credentials: SASL_AUTHENTICATION_FAILED.*\(check kafka\.sasl\.username, kafka\.sasl\.password and kafka\.sasl\.mechanism\)`},
		{"kafka plain-text port", func(s *tlsServers) { s.brokers = p.Kafka.Brokers },
			`kafka at \[.*\] is not reachable: .*\(check kafka\.brokers: each must be an SSL or SASL_SSL listener while kafka\.tls\.enabled is true\)`},
		{"elasticsearch wrong CA", func(s *tlsServers) { s.esCA = other },
			`elasticsearch at \[https://.*\] is not reachable: .*certificate signed by unknown authority \(check elasticsearch\.tls\.ca_file: it must hold the CA`},
		{"elasticsearch wrong password", func(s *tlsServers) { s.esPass = "wrong-es-secret" },
			`elasticsearch at \[https://.*\] refused the credentials.*check elasticsearch\.username/password`},
		{"elasticsearch plain-text port", func(s *tlsServers) { s.esURL = strings.Replace(p.ES.URL, "http://", "https://", 1) },
			`elasticsearch at \[https://.*\] is not reachable: .*\(check elasticsearch\.urls: that port does not speak TLS`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := good
			c.change(&s)
			path := p.Write("bad.yaml", s.yaml())
			cmd := testenv.DecantCmd(t, nil, "run", "--config", path)
			started := time.Now()
			out, code := runToExit(t, cmd, 90*time.Second)
			t.Logf("exit %d after %s:\n%s", code, time.Since(started).Round(100*time.Millisecond), out)
			if code != 2 {
				t.Fatalf("exit code %d, want 2", code)
			}
			if !regexp.MustCompile(c.want).Match(out) {
				t.Fatalf("output does not match %q", c.want)
			}
			for _, secret := range []string{tlsKafkaPass, "wrong-kafka-secret", tlsESPass, "wrong-es-secret", tlsPGPass, "wrong-secret"} {
				if strings.Contains(string(out), secret) {
					t.Fatalf("output leaks the secret %q", secret)
				}
			}
		})
	}
	// Nothing was created by any of the runs.
	var slots int
	if err := p.PG.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, p.PG.Name).Scan(&slots); err != nil || slots != 0 {
		t.Errorf("replication slots created by failed runs: %d (%v)", slots, err)
	}
	topics, err := p.Kafka.Admin.ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, p.Kafka.Prefix+".") {
			t.Errorf("topic %s created by a failed run", name)
		}
	}
}

// pgPort is the port of a postgres:// URL.
func pgPort(t *testing.T, dsn string) string {
	m := regexp.MustCompile(`@127\.0\.0\.1:(\d+)/`).FindStringSubmatch(dsn)
	if m == nil {
		t.Fatalf("no 127.0.0.1 port in %s", dsn)
	}
	return m[1]
}
