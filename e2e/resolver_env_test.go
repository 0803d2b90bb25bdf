package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/streamer"
	"github.com/decant-cdc/decant/watermark"
	"github.com/decant-cdc/decant/wire"
)

// resEnv is one resolver pipeline under test: a database, a topic prefix,
// an index prefix, a streamer, map and build stages, and the real indexer
// sinks behind a version checker.
type resEnv struct {
	t      *testing.T
	pg     *testenv.PG
	k      *testenv.KafkaEnv
	es     *testenv.ESEnv
	model  *mappings.Model
	pool   *pgxpool.Pool
	slot   string
	cfg    resolver.Config
	kafka  *indexer.KafkaSink
	search *indexer.ESSink // the first search engine's sink (of es)
	// engines are the search engines the sinks write to, es first.
	engines []resEngine
	check   *resVersionCheck
	sink    resolver.Sink
	log     *slog.Logger
	// mapping is the mapping YAML with the index prefix filled in, for
	// stages run as child processes (startChild).
	mapping string

	// streamDSN is the database the in-process streamer reads, slotDB
	// where its slot lives: the test's database, or its hot standby
	// (useStandby).
	streamDSN string
	slotDB    *pgxpool.Pool

	mu        sync.Mutex
	procs     map[string]*resProc
	childLogs string // directory of child stage logs (logDir)
}

// resProc is one running stage.
type resProc struct {
	cancel context.CancelFunc
	done   chan error
}

// bindMapping loads one mapping file and binds it to db's catalog.
func bindMapping(ctx context.Context, db mappings.Querier, mapping string) (*mappings.Model, error) {
	set, err := mappings.Load([]mappings.File{{Name: "test.yaml", Data: []byte(mapping)}})
	if err != nil {
		return nil, err
	}
	cat, err := mappings.ReadCatalog(ctx, db)
	if err != nil {
		return nil, err
	}
	return mappings.Bind(set, cat)
}

// resEngine is one search engine under test and the sink writing to it.
type resEngine struct {
	env  *testenv.ESEnv
	sink *indexer.ESSink
}

// newResEnv creates the schema, binds mappingYAML (whose aggregates must
// set elasticsearch.index to "IDX_<name>"; IDX_ is replaced by the test's
// index prefix) and creates the sinks, Elasticsearch as the search sink.
// Nothing runs yet.
func newResEnv(t *testing.T, schemaSQL, mappingYAML string) *resEnv {
	t.Helper()
	return newResEnvOn(t, schemaSQL, mappingYAML, "elasticsearch")
}

// newResEnvOn is newResEnv with the search sinks of the engines given
// ("elasticsearch", "opensearch"; at least one), each holding the same
// indexes.
func newResEnvOn(t *testing.T, schemaSQL, mappingYAML string, engines ...string) *resEnv {
	t.Helper()
	pg := testenv.Postgres(t)
	k := testenv.Kafka(t)
	var envs []*testenv.ESEnv
	for _, kind := range engines {
		env := testenv.SearchEngine(t, kind)
		if len(envs) > 0 {
			env.Prefix = envs[0].Prefix // the same index names everywhere
		}
		envs = append(envs, env)
	}
	es := envs[0]
	pg.Exec(t, schemaSQL)
	ctx := testenv.Ctx(t)
	mappingYAML = strings.ReplaceAll(mappingYAML, "IDX_", es.Prefix+"_")
	model, err := bindMapping(ctx, pg.Pool, mappingYAML)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := resolver.NewPool(ctx, pg.DSN, "decant-test", 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	level := slog.LevelWarn
	if os.Getenv("DECANT_TEST_VERBOSE") != "" {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	kopts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	e := &resEnv{t: t, pg: pg, k: k, es: es, model: model, pool: pool, slot: "s_" + testenv.Suffix(), log: log, mapping: mappingYAML, procs: map[string]*resProc{},
		streamDSN: pg.DSN, slotDB: pg.Pool}
	e.cfg = resolver.Config{Kafka: kopts, TopicPrefix: k.Prefix, Partitions: 3, BatchSize: 200, Logger: log}
	e.kafka, err = indexer.NewKafkaSink(indexer.KafkaSinkConfig{Kafka: kopts, TopicPrefix: k.Prefix, Partitions: 3, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.kafka.Close)
	e.check = &resVersionCheck{last: map[string]uint64{}}
	sinks := resolver.Sinks{e.check, e.kafka}
	for _, env := range envs {
		aliases := map[string]string{}
		for _, a := range model.Aggregates {
			aliases[a.Name] = a.Index
			if _, err := indexer.EnsureIndex(ctx, env.Search, indexer.SpecFor(a, true)); err != nil {
				t.Fatal(err)
			}
		}
		sink, err := indexer.NewESSink(indexer.ESSinkConfig{Client: env.Search, Kind: env.Kind, Aliases: aliases, Kafka: kopts, TopicPrefix: k.Prefix, Partitions: 1, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sink.Close)
		e.engines = append(e.engines, resEngine{env: env, sink: sink})
		sinks = append(sinks, sink)
	}
	e.search = e.engines[0].sink
	e.sink = sinks
	t.Cleanup(e.stopAll)
	return e
}

// useStandby moves the in-process streamer, map and build stages to a hot
// standby of the test's database (PostgreSQL 16+, testenv.Standby); the
// workload still writes to the primary, where the publication is created
// first (a standby is read-only). The primary logs a standby snapshot
// every 200ms so that the standby can create the slot without waiting for
// the next one PostgreSQL writes by itself (every 15 s, if the primary is
// busy). Call it before starting any stage.
func (e *resEnv) useStandby() {
	t := e.t
	var tables []string
	for _, tn := range e.model.Tables() {
		tables = append(tables, tn.Sanitize())
	}
	e.pg.Exec(t, "CREATE PUBLICATION decant FOR TABLE "+strings.Join(tables, ", "))
	dsn := testenv.Standby(t, e.pg)
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := resolver.NewPool(ctx, dsn, "decant-test", 16)
	if err != nil {
		t.Fatal(err)
	}
	slotDB, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			_, _ = e.pg.Pool.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	e.pool, e.slotDB, e.streamDSN = pool, slotDB, dsn
	// The slot lives on the standby, where testenv.Postgres's cleanup does
	// not look: stop the stages, then drop it.
	t.Cleanup(func() {
		e.stopAll()
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		if _, err := slotDB.Exec(dctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, e.slot); err != nil {
			t.Logf("drop slot %s on the standby: %v", e.slot, err)
		}
		cancel()
		slotDB.Close()
		pool.Close()
	})
}

// start runs a stage under name until stop(name) or the end of the test.
func (e *resEnv) start(name string, run func(ctx context.Context) error) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &resProc{cancel: cancel, done: make(chan error, 1)}
	e.mu.Lock()
	if _, dup := e.procs[name]; dup {
		e.mu.Unlock()
		e.t.Fatalf("stage %s is already running", name)
	}
	e.procs[name] = p
	e.mu.Unlock()
	go func() { p.done <- run(ctx) }()
}

func (e *resEnv) stop(name string) {
	e.mu.Lock()
	p := e.procs[name]
	delete(e.procs, name)
	e.mu.Unlock()
	if p == nil {
		return
	}
	p.cancel()
	select {
	case err := <-p.done:
		if err != nil {
			e.t.Errorf("stage %s: %v", name, err)
		}
	case <-time.After(60 * time.Second):
		e.t.Errorf("stage %s did not stop within 60s", name)
	}
}

func (e *resEnv) stopAll() {
	e.mu.Lock()
	var names []string
	for n := range e.procs {
		names = append(names, n)
	}
	e.mu.Unlock()
	for _, n := range names {
		e.stop(n)
	}
}

func (e *resEnv) startStreamer() {
	var tables []string
	for _, tn := range e.model.Tables() {
		tables = append(tables, tn.String())
	}
	s, err := streamer.New(streamer.Config{
		DSN: e.streamDSN, Publication: "decant", CreatePublication: true, Tables: tables, Slot: e.slot,
		TopicPrefix: e.k.Prefix, Partitions: 3, Kafka: e.cfg.Kafka,
		StatusInterval: 200 * time.Millisecond, HeartbeatInterval: time.Second, TakeoverPoll: 500 * time.Millisecond, Logger: e.log,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.start("stream", func(ctx context.Context) error { defer s.Close(); return s.Run(ctx) })
}

func (e *resEnv) startMapper(name string) {
	m, err := resolver.NewMapper(e.cfg, e.model, e.pool)
	if err != nil {
		e.t.Fatal(err)
	}
	e.start(name, func(ctx context.Context) error { return m.Run(ctx) })
}

func (e *resEnv) startBuilder(name string) {
	b, err := resolver.NewBuilder(e.cfg, e.model, e.pool, e.sink)
	if err != nil {
		e.t.Fatal(err)
	}
	e.start(name, func(ctx context.Context) error { return b.Run(ctx) })
}

// topics returns the raw topics and refs topics of the model.
func (e *resEnv) topics() (raw, refs []string) {
	for _, tn := range e.model.Tables() {
		raw = append(raw, wire.RawTopic(e.k.Prefix, tn.Schema, tn.Name))
	}
	for _, a := range e.model.Aggregates {
		refs = append(refs, wire.RefsTopic(e.k.Prefix, a.Name))
	}
	return raw, refs
}

// waitQuiet waits until every change committed so far is in the sinks:
// the streamer finished its initial snapshot and the slot confirmed the
// current WAL position (every change is in the raw topics), then the map
// group committed every raw record (every ref is in the refs topics), then
// the build group committed every ref. The snapshot comes first: a slot
// created after a change confirms its consistent point at once, before the
// snapshot rows holding that change are in Kafka, and a group with nothing
// to read has no lag.
func (e *resEnv) waitQuiet(timeout time.Duration) {
	e.t.Helper()
	ctx := testenv.Ctx(e.t)
	e.waitSnapshot(timeout)
	var target string
	if err := e.pg.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		e.t.Fatal(err)
	}
	want, _ := wire.ParseLSN(target)
	testenv.WaitFor(e.t, "the slot to confirm "+target, timeout, func() (bool, error) {
		var s *string
		if err := e.slotDB.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&s); err != nil || s == nil {
			return false, err
		}
		got, err := wire.ParseLSN(*s)
		if err != nil {
			return false, err
		}
		return got >= want, fmt.Errorf("confirmed %s", *s)
	})
	raw, refs := e.topics()
	for _, w := range []struct {
		group  string
		topics []string
	}{{e.k.Prefix + ".map", raw}, {e.k.Prefix + ".build", refs}} {
		testenv.WaitFor(e.t, "group "+w.group+" to commit everything", timeout, func() (bool, error) {
			lag, err := testenv.GroupLag(ctx, e.k.Admin, w.group, w.topics...)
			return err == nil && lag == 0, fmt.Errorf("lag %d (%v)", lag, err)
		})
	}
}

// waitSnapshot waits until the streamer's initial snapshot is complete:
// every snapshot row is in the raw topics.
func (e *resEnv) waitSnapshot(timeout time.Duration) {
	e.t.Helper()
	ctx := testenv.Ctx(e.t)
	marker := watermark.New(watermark.Config{Slot: e.slot, TopicPrefix: e.k.Prefix, Snapshot: true}, e.pg.Pool, e.k.Admin, e.cfg.Kafka)
	testenv.WaitFor(e.t, "the streamer to finish its initial snapshot", timeout, func() (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return marker.SnapshotComplete(rctx)
	})
}

// resVersionCheck is a Sink that records every version violation: a
// document written with a lower version than one already written for its
// key. Builds of one key are ordered, so there must be none.
type resVersionCheck struct {
	mu         sync.Mutex
	last       map[string]uint64
	violations []string
	writes     int
}

func (c *resVersionCheck) Write(_ context.Context, docs []wire.Document) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range docs {
		k := d.Aggregate + " " + string(d.ID)
		if prev, ok := c.last[k]; ok && d.Version < prev {
			c.violations = append(c.violations, fmt.Sprintf("%s: version %d after %d", k, d.Version, prev))
		}
		c.last[k] = max(c.last[k], d.Version)
		c.writes++
	}
	return nil
}

// aggTopicState folds the aggregate topic into the last document per key
// and reports keys whose versions decreased from one record to the next.
func (e *resEnv) aggTopicState(aggregate string) (map[string]json.RawMessage, []string) {
	e.t.Helper()
	topic := wire.AggTopic(e.k.Prefix, aggregate)
	ctx, cancel := context.WithTimeout(testenv.Ctx(e.t), 2*time.Minute)
	defer cancel()
	recs, err := testenv.ReadTopic(ctx, e.k.Admin, e.k.Brokers, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	state := map[string]json.RawMessage{}
	var problems []string
	last := map[string]uint64{}
	for _, r := range recs {
		k := string(r.Key)
		if r.Value == nil {
			delete(state, k)
			continue
		}
		var d wire.Document
		if err := json.Unmarshal(r.Value, &d); err != nil {
			problems = append(problems, fmt.Sprintf("key %s: value is not a document: %v", k, err))
			continue
		}
		if d.Version < last[k] {
			problems = append(problems, fmt.Sprintf("key %s: version %d after %d in the aggregate topic", k, d.Version, last[k]))
		}
		last[k] = max(last[k], d.Version)
		if d.Deleted {
			delete(state, k)
		} else {
			state[k] = d.Doc
		}
	}
	return state, problems
}

// esState reads every document of the aggregate's alias, keyed by the
// aggregate key of the oracle (built from the _id with idOf).
func (e *resEnv) esState(aggregate string, keyOf func(id string) string) map[string]json.RawMessage {
	e.t.Helper()
	return e.searchState(e.engines[0], aggregate, keyOf)
}

// searchState is esState on one search engine.
func (e *resEnv) searchState(en resEngine, aggregate string, keyOf func(id string) string) map[string]json.RawMessage {
	e.t.Helper()
	ctx := testenv.Ctx(e.t)
	if err := en.sink.Refresh(ctx, aggregate); err != nil {
		e.t.Fatal(err)
	}
	alias := e.model.Aggregate(aggregate).Index
	hits, err := testenv.ESHits(ctx, en.env.URL, alias, true)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, h := range hits {
		out[keyOf(h.ID)] = h.Source
	}
	return out
}

// oracleState runs an oracle query returning (key json, doc jsonb) rows.
func (e *resEnv) oracleState(sql string) map[string]json.RawMessage {
	e.t.Helper()
	rows, err := e.pool.Query(testenv.Ctx(e.t), sql)
	if err != nil {
		e.t.Fatalf("oracle: %v", err)
	}
	defer rows.Close()
	out := map[string]json.RawMessage{}
	for rows.Next() {
		var k, d []byte
		if err := rows.Scan(&k, &d); err != nil {
			e.t.Fatal(err)
		}
		out[string(k)] = append(json.RawMessage(nil), d...)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// resCanon re-encodes JSON with sorted keys and exact numbers.
func resCanon(b []byte) string {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "<invalid JSON: " + string(b) + ">"
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// resDiff collects every difference between a sink's documents and the
// oracle's.
func resDiff(sink string, got, want map[string]json.RawMessage) []string {
	var problems []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: %s missing", sink, k))
		case resCanon(g) != resCanon(w):
			problems = append(problems, fmt.Sprintf("%s: %s differs:\n    got  %s\n    want %s", sink, k, resCanon(g), resCanon(w)))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("%s: %s exists but its root does not", sink, k))
		}
	}
	sort.Strings(problems)
	return problems
}

// resReport fails the test with every problem (the first 50 printed in full).
func resReport(t *testing.T, problems []string) {
	t.Helper()
	if len(problems) == 0 {
		return
	}
	shown := problems
	if len(shown) > 50 {
		shown = append(shown[:50:50], fmt.Sprintf("… and %d more", len(problems)-50))
	}
	t.Fatalf("%d mismatches:\n%s", len(problems), strings.Join(shown, "\n"))
}

// Stages as child processes, so that tests can kill -9 them and read
// their peak memory. TestMain turns the test binary into one stage when
// resChildSpec is what a child stage needs: the same settings as the
// in-process stages of resEnv.
type resChildSpec struct {
	Stage      string // "map" or "build"
	DSN        string
	Brokers    []string
	Prefix     string
	ESURL      string
	Mapping    string // mapping YAML, index names filled in
	Partitions int
	BatchSize  int
	// MaxInFlightBytes is resolver.Config's (0: the default).
	MaxInFlightBytes int
	// Metrics, when set, is a host:port on which the child serves its
	// stage's Prometheus metrics at /metrics.
	Metrics string
	// Polled, when set, is a file that receives one line "topic partition
	// offset" per consumed record of the stage's input topics, written
	// unbuffered so that a kill -9 loses none: lines that repeat across
	// the generations of a stage are redeliveries.
	Polled string
	// StopBeforeWrite, for a build child, sets resolver.StopBeforeWriteEnv:
	// the child stops itself before writing a document containing it.
	StopBeforeWrite string
	// Unfenced runs a build child without fencing (resolver.fence: false).
	Unfenced bool
}

func TestMain(m *testing.M) {
	testenv.RunChild(resRunChild)
	code := m.Run()
	testenv.RemoveDecant()
	os.Exit(code)
}

func resRunChild(ctx context.Context, c resChildSpec, log *slog.Logger) int {
	if err := resChildStage(ctx, c, log); err != nil {
		fmt.Fprintf(os.Stderr, "%s stage: %v\n", c.Stage, err)
		return 1
	}
	return 0
}

// resChildStage binds the mapping and runs the stage until ctx ends.
func resChildStage(ctx context.Context, c resChildSpec, log *slog.Logger) error {
	pool, err := resolver.NewPool(ctx, c.DSN, "decant-test-"+c.Stage, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	model, err := bindMapping(ctx, pool, c.Mapping)
	if err != nil {
		return err
	}
	plain := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	stage := append([]kgo.Opt{}, plain...)
	if c.Polled != "" {
		f, err := os.OpenFile(c.Polled, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		input := map[string]bool{}
		for _, tn := range model.Tables() {
			input[wire.RawTopic(c.Prefix, tn.Schema, tn.Name)] = c.Stage == "map"
		}
		for _, a := range model.Aggregates {
			input[wire.RefsTopic(c.Prefix, a.Name)] = c.Stage == "build"
		}
		stage = append(stage, kgo.WithHooks(&resPolledLog{f: f, input: input}))
	}
	cfg := resolver.Config{Kafka: stage, TopicPrefix: c.Prefix, Partitions: c.Partitions, BatchSize: c.BatchSize, MaxInFlightBytes: c.MaxInFlightBytes,
		// A killed member stays in its group until its session times
		// out; a short timeout lets the restarted stage take over sooner.
		SessionTimeout: 10 * time.Second, Unfenced: c.Unfenced, Logger: log}
	if c.StopBeforeWrite != "" {
		if err := os.Setenv(resolver.StopBeforeWriteEnv, c.StopBeforeWrite); err != nil {
			return err
		}
	}
	if c.Metrics != "" {
		reg := prometheus.NewRegistry()
		cfg.Registerer = reg
		ln, err := net.Listen("tcp", c.Metrics)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln) //nolint:errcheck // ends with the process
		defer srv.Close()
	}
	switch c.Stage {
	case "map":
		m, err := resolver.NewMapper(cfg, model, pool)
		if err != nil {
			return err
		}
		return m.Run(ctx)
	case "build":
		ks, err := indexer.NewKafkaSink(indexer.KafkaSinkConfig{Kafka: plain, TopicPrefix: c.Prefix, Partitions: c.Partitions, Logger: log})
		if err != nil {
			return err
		}
		defer ks.Close()
		es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{c.ESURL}})
		if err != nil {
			return err
		}
		aliases := map[string]string{}
		for _, a := range model.Aggregates {
			aliases[a.Name] = a.Index
			if _, err := indexer.EnsureIndex(ctx, es, indexer.SpecFor(a, true)); err != nil {
				return err
			}
		}
		ess, err := indexer.NewESSink(indexer.ESSinkConfig{Client: es, Aliases: aliases, Kafka: plain, TopicPrefix: c.Prefix, Partitions: 1, Logger: log})
		if err != nil {
			return err
		}
		defer ess.Close()
		b, err := resolver.NewBuilder(cfg, model, pool, resolver.Sinks{ks, ess})
		if err != nil {
			return err
		}
		return b.Run(ctx)
	}
	return fmt.Errorf("unknown stage %q", c.Stage)
}

// resPolledLog is a kgo hook that appends "topic partition offset" of
// every polled record of the input topics to f, one write per record.
type resPolledLog struct {
	mu    sync.Mutex
	f     *os.File
	input map[string]bool // the stage's input topics: raw topics (map) or refs topics (build)
}

func (h *resPolledLog) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if !polled || !h.input[r.Topic] {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, _ = fmt.Fprintf(h.f, "%s %d %d\n", r.Topic, r.Partition, r.Offset)
}

// startChild runs stage ("map" or "build") in a child process; gen
// numbers the restarts in file names. polled, when set, receives the
// stage's consumed records (resChildSpec.Polled). It returns an error
// instead of failing so that it can be called from any goroutine.
func (e *resEnv) startChild(stage string, gen int, polled string) (*testenv.Proc, error) {
	return e.startChildSpec(gen, resChildSpec{Stage: stage, Polled: polled})
}

// startChildSpec is startChild with more of the child's spec: the
// servers, prefixes, mapping, partitions and (when 0) the batch size are
// the environment's.
func (e *resEnv) startChildSpec(gen int, spec resChildSpec) (*testenv.Proc, error) {
	spec.DSN, spec.Brokers, spec.Prefix, spec.ESURL = e.pg.DSN, e.k.Brokers, e.k.Prefix, e.es.URL
	spec.Mapping, spec.Partitions = e.mapping, e.cfg.Partitions
	if spec.BatchSize == 0 {
		spec.BatchSize = e.cfg.BatchSize
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return testenv.StartChild(e.t, fmt.Sprintf("%s#%d", spec.Stage, gen), filepath.Join(e.logDir(), fmt.Sprintf("%s-%d.log", spec.Stage, gen)), string(raw))
}

// logDir is a directory for child logs that survives the test when
// DECANT_TEST_KEEP_LOGS is set (it is printed then).
func (e *resEnv) logDir() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.childLogs == "" {
		e.childLogs = e.t.TempDir()
		if os.Getenv("DECANT_TEST_KEEP_LOGS") != "" {
			dir, err := os.MkdirTemp("", "decant-children-")
			if err == nil {
				e.childLogs = dir
				e.t.Logf("child logs in %s", dir)
			}
		}
	}
	return e.childLogs
}

// resTerm sends SIGTERM and waits up to a minute for a clean exit; it
// returns the exit error.
func resTerm(c *testenv.Proc) error {
	c.Term(time.Minute)
	if err := c.Err(); err != nil {
		return fmt.Errorf("after SIGTERM: %w", err)
	}
	return nil
}

// resSize is a test's size: the environment variable name when set to a
// positive integer, else heavy with DECANT_HEAVY=1 (make test-heavy), else
// def.
func resSize(name string, def, heavy int) int {
	if os.Getenv("DECANT_HEAVY") == "1" {
		def = heavy
	}
	return benchEnvInt(name, def)
}

// resBackfill backfills aggregate through the refs topic and waits until
// the build stage has built every id (within timeout, when not 0).
func resBackfill(ctx context.Context, tb testing.TB, cfg resolver.Config, pool *pgxpool.Pool, model *mappings.Model, aggregate string, timeout time.Duration) *resolver.Backfilled {
	tb.Helper()
	bf, err := resolver.Backfill(ctx, cfg, pool, model, aggregate, resolver.BackfillOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := resolver.WaitBuilt(ctx, cfg, bf, nil); err != nil {
		tb.Fatalf("backfill of %s: wait for the build stage: %v", aggregate, err)
	}
	return bf
}
