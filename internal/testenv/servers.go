package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/esclient"
	"github.com/decant-cdc/decant/wire"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// PGAdminDSN is the DSN of the server's maintenance database:
// DECANT_TEST_PG_DSN, else the server e2e/infra/pg.sh starts for
// DECANT_PG_VERSION (15: port 55432, 16–18: port 554<major>) on
// DECANT_PG_PORT when that is set.
func PGAdminDSN() string {
	if dsn := os.Getenv("DECANT_TEST_PG_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:" + PGPort(os.Getenv("DECANT_PG_VERSION"), os.Getenv("DECANT_PG_PORT")) + "/postgres?sslmode=disable"
}

// PGPort is the port e2e/infra/pg.sh gives the major version (15 when
// empty) unless port, DECANT_PG_PORT, is set; common.sh has the same rule.
func PGPort(version, port string) string {
	switch {
	case port != "":
		return port
	case version == "" || version == "15":
		return "55432"
	default:
		return "554" + version
	}
}

// PGVersion is the PostgreSQL major the tests must run against
// (DECANT_PG_VERSION), or 0 when any will do.
func PGVersion() int {
	v, _ := strconv.Atoi(os.Getenv("DECANT_PG_VERSION"))
	return v
}

// ServerMajor returns the major version of the server conn is on
// (server_version_num / 10000).
func ServerMajor(ctx context.Context, conn interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var num int
	err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&num)
	return num / 10000, err
}

// KafkaBrokers are the test broker addresses.
func KafkaBrokers() []string {
	return strings.Split(env("DECANT_TEST_KAFKA_BROKERS", "127.0.0.1:59092"), ",")
}

// ESURL is the test Elasticsearch node.
func ESURL() string { return env("DECANT_TEST_ES_URL", "http://127.0.0.1:59200") }

// OSURL is the test OpenSearch node (e2e/infra/opensearch.sh).
func OSURL() string { return env("DECANT_TEST_OS_URL", "http://127.0.0.1:59201") }

// InCI reports whether tests run under CI=true, where missing servers fail.
func InCI() bool { return os.Getenv("CI") == "true" }

// unavailable fails (CI) or skips (elsewhere) a test whose server is missing.
func unavailable(t testing.TB, server string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not reachable: %v (start it with `make infra-up`)", server, err)
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Integration marks a test that needs the real servers (or child processes
// that do): it is skipped in -short mode, the unit phase of make test.
func Integration(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs real servers; skipped in -short mode (the unit phase of make test)")
	}
}

// Suffix returns a random lower-case suffix for per-test names.
func Suffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Ctx returns a context cancelled at test cleanup.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// PG is a fresh database for one test.
type PG struct {
	Name string        // database name
	DSN  string        // DSN of the database (trust auth, sslmode=disable)
	Pool *pgxpool.Pool // pool on the database, closed at cleanup
}

// Exec runs SQL statements and fails the test on error.
func (p *PG) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := p.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", truncate(sql, 200), err)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Postgres creates a database named decant_<test>_<suffix> and drops it (with
// its replication slots) when the test ends.
func Postgres(t testing.TB) *PG {
	t.Helper()
	return PostgresOn(t, PGAdminDSN())
}

// PostgresOn is Postgres on the server whose maintenance database is
// adminDSN (a multi-host DSN too: the database's DSN keeps its hosts and
// parameters).
func PostgresOn(t testing.TB, adminDSN string) *PG {
	t.Helper()
	Integration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		unavailable(t, "PostgreSQL", err)
	}
	defer admin.Close(context.Background())
	// A suite asked to run against one version must not pass against
	// another (a stale DECANT_TEST_PG_DSN, a server on the wrong port).
	if want := PGVersion(); want != 0 {
		got, err := ServerMajor(ctx, admin)
		if err != nil {
			t.Fatalf("PostgreSQL: server version: %v", err)
		}
		if got != want {
			t.Fatalf("PostgreSQL at %s is version %d, DECANT_PG_VERSION wants %d", adminDSN, got, want)
		}
	}
	name := "decant_" + Suffix()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("PostgreSQL: create database %s: %v", name, err)
	}
	u, err := url.Parse(adminDSN)
	if err != nil {
		t.Fatalf("DECANT_TEST_PG_DSN: %v", err)
	}
	u.Path = "/" + name
	p := &PG{Name: name, DSN: u.String()}
	p.Pool, err = pgxpool.New(ctx, p.DSN)
	if err != nil {
		t.Fatalf("PostgreSQL: connect to %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.Pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, adminDSN)
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer c.Close(context.Background())
		// Slots pin WAL: drop them (terminating their walsenders) with the database.
		_, _ = c.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
		time.Sleep(100 * time.Millisecond)
		_, _ = c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("cleanup: drop database %s: %v", name, err)
		}
	})
	return p
}

// PGStandbyDSN is the DSN of the maintenance database of the hot standby
// `e2e/infra/pg.sh standby-up` starts: DECANT_TEST_PG_STANDBY_DSN, else
// port DECANT_PG_STANDBY_PORT or 555<major> when DECANT_PG_VERSION is 16+
// (logical decoding on a standby needs 16); "" when there is none.
func PGStandbyDSN() string {
	if dsn := os.Getenv("DECANT_TEST_PG_STANDBY_DSN"); dsn != "" {
		return dsn
	}
	port := os.Getenv("DECANT_PG_STANDBY_PORT")
	if port == "" {
		if PGVersion() < 16 {
			return ""
		}
		port = "555" + strconv.Itoa(PGVersion())
	}
	return "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable"
}

// StandbyVersion skips a test that decodes from a hot standby when this
// run's PostgreSQL (DECANT_PG_VERSION) is older than 16, which cannot:
// a version this run does not cover, not a missing server (make test runs
// the standby tests on 18 in test-pg-drift; make test-pg on 16, 17 and 18).
// A 16+ standby that is unreachable fails under CI=true (Standby).
func StandbyVersion(t testing.TB) {
	t.Helper()
	if PGStandbyDSN() == "" {
		t.Skipf("logical decoding on a standby needs PostgreSQL 16+; this run uses PostgreSQL %d (make test runs it on 18 in test-pg-drift)", PGVersion())
	}
}

// Standby returns the DSN of pg's database on the hot standby, once the
// standby has replayed everything the primary had written when it was
// called. It skips the test below PostgreSQL 16 (StandbyVersion) and, like
// Postgres, fails (CI) or skips when the standby is unreachable.
func Standby(t testing.TB, pg *PG) string {
	t.Helper()
	admin := PGStandbyDSN()
	StandbyVersion(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var target string
	if err := pg.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		t.Fatalf("PostgreSQL primary: %v", err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("standby DSN: %v", err)
	}
	u.Path = "/" + pg.Name
	dsn := u.String()
	c, err := pgx.Connect(ctx, admin)
	if err != nil {
		unavailable(t, "PostgreSQL standby", err)
	}
	defer c.Close(context.Background())
	WaitFor(t, "the standby to replay the primary's WAL up to "+target, time.Minute, func() (bool, error) {
		var ok bool
		err := c.QueryRow(ctx, `SELECT pg_is_in_recovery() AND pg_last_wal_replay_lsn() >= $1::pg_lsn`, target).Scan(&ok)
		return ok, err
	})
	return dsn
}

// KafkaEnv is a topic prefix and a client for one test.
type KafkaEnv struct {
	Brokers []string
	Prefix  string       // unique topic prefix, e.g. t3f9a0c1b2
	Client  *kgo.Client  // plain client, closed at cleanup
	Admin   *kadm.Client // admin client on Client
}

// Kafka returns a unique topic prefix; topics starting with it are deleted at cleanup.
func Kafka(t testing.TB) *KafkaEnv {
	t.Helper()
	Integration(t)
	brokers := KafkaBrokers()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("Kafka: %v", err)
	}
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := adm.BrokerMetadata(ctx); err != nil {
		cl.Close()
		unavailable(t, "Kafka", err)
	}
	k := &KafkaEnv{Brokers: brokers, Prefix: "t" + Suffix(), Client: cl, Admin: adm}
	t.Cleanup(func() {
		_ = k.DeleteTopics()
		cl.Close()
	})
	return k
}

// DeleteTopics deletes the topics starting with the prefix, as cleanup
// does: a benchmark that is done with them stops Kafka's work on them
// too.
func (k *KafkaEnv) DeleteTopics() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := k.Admin.ListTopics(ctx)
	if err != nil {
		return err
	}
	var del []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, k.Prefix+".") {
			del = append(del, name)
		}
	}
	if len(del) == 0 {
		return nil
	}
	res, err := k.Admin.DeleteTopics(ctx, del...)
	if err == nil {
		err = res.Error()
	}
	return err
}

// Records reads every record of topic, from its start offsets to its end
// offsets at the time of the call (see ReadTopic), within a minute.
func (k *KafkaEnv) Records(tb testing.TB, topic string) []*kgo.Record {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs, err := ReadTopic(ctx, k.Admin, k.Brokers, topic)
	if err != nil {
		tb.Fatal(err)
	}
	return recs
}

// TailClient returns a client that consumes topic from the end offsets its
// partitions have now, so that it sees only the records produced after the
// call. The caller closes it.
func (k *KafkaEnv) TailClient(ctx context.Context, topic string) (*kgo.Client, error) {
	ends, err := k.Admin.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { from[o.Partition] = kgo.NewOffset().At(o.Offset) })
	return kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
}

// ReadTopic reads every record of topic, from its start offsets to the end
// offsets it lists first; the records of a partition are in offset order.
// Fetch errors are retried by the client until ctx ends.
func ReadTopic(ctx context.Context, adm *kadm.Client, brokers []string, topic string) ([]*kgo.Record, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	from := map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) {
		switch {
		case o.Partition < 0: // the topic's error: the end offsets report it
		case o.Err != nil:
			// A partition of a topic just created may not be hosted yet;
			// its end offset, listed next, says whether it is now. The
			// client finds its start (kgo.Offset.At(-2)).
			from[o.Partition] = -2
		default:
			from[o.Partition] = o.Offset
		}
	})
	return ReadTopicFrom(ctx, adm, brokers, topic, from)
}

// ReadTopicFrom reads the records of topic from the offsets in from (a
// partition missing there is not read) to the end offsets it lists first,
// as ReadTopic does; it reads the records written since the end offsets
// listed at some earlier moment (TopicEnds).
func ReadTopicFrom(ctx context.Context, adm *kadm.Client, brokers []string, topic string, from map[int32]int64) ([]*kgo.Record, error) {
	ends, err := TopicEnds(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	parts := map[int32]kgo.Offset{}
	want := map[int32]int64{}
	for p, end := range ends {
		if s, ok := from[p]; ok && end > max(s, 0) { // records to read
			parts[p] = kgo.NewOffset().At(s)
			want[p] = end
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(append(wire.CommittedReader(), kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s: %w (partitions left: %v)", topic, ctx.Err(), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok {
				return
			}
			if r.Offset < end && !r.Attrs.IsControl() {
				out = append(out, r)
			}
			// An aborted transaction's records are skipped: the record
			// after end-1 may be the first one seen (resolver.scanKeys).
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out, nil
}

// TopicEnds lists the end offsets of topic's partitions now, for a later
// ReadTopicFrom.
func TopicEnds(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// ESEnv is a search engine (Elasticsearch or OpenSearch), an index prefix
// and a client for one test.
type ESEnv struct {
	Kind   string // "elasticsearch" or "opensearch"
	URL    string
	Prefix string // unique index prefix, e.g. t3f9a0c1b2
	// Client is the go-elasticsearch client: Elasticsearch only (it
	// refuses other servers), nil for OpenSearch.
	Client *elasticsearch.Client
	// Search sends esapi requests to either engine.
	Search esapi.Transport
}

// Do sends a request and returns its status code and body; it fails the
// test when the request cannot be sent.
func (e *ESEnv) Do(tb testing.TB, req esapi.Request) (int, []byte) {
	tb.Helper()
	res, err := req.Do(context.Background(), e.Search)
	if err != nil {
		tb.Fatalf("%T: %v", req, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// Elasticsearch returns a unique index prefix; indexes starting with it are deleted at cleanup.
func Elasticsearch(t testing.TB) *ESEnv {
	t.Helper()
	Integration(t)
	// decant's own client settings, so that direct loads measured as
	// ceilings get the same connections and uncompressed responses.
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{ESURL()}, Transport: esclient.Transport(nil)})
	if err != nil {
		t.Fatalf("Elasticsearch: %v", err)
	}
	res, err := es.Info()
	if err != nil {
		unavailable(t, "Elasticsearch", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		unavailable(t, "Elasticsearch", fmt.Errorf("GET / returned %s", res.Status()))
	}
	e := &ESEnv{Kind: "elasticsearch", URL: ESURL(), Prefix: "t" + Suffix(), Client: es, Search: es}
	t.Cleanup(e.deleteIndexes)
	return e
}

// deleteIndexes deletes the test's indexes (those starting with Prefix).
func (e *ESEnv) deleteIndexes() {
	res, err := esapi.IndicesDeleteRequest{Index: []string{e.Prefix + "*"}}.Do(context.Background(), e.Search)
	if err == nil {
		res.Body.Close()
	}
}

// WaitFor polls cond every 100ms until it returns true, and fails the test
// naming reason when timeout passes first. The last error cond returned is
// reported with the failure.
func WaitFor(t testing.TB, reason string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	WaitEvery(t, reason, timeout, 100*time.Millisecond, cond)
}

// WaitEvery is WaitFor polling every interval.
func WaitEvery(t testing.TB, reason string, timeout, interval time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, reason, lastErr)
		}
		time.Sleep(interval)
	}
}
