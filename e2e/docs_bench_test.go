package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/wire"
)

// The documents benchmarks (issue 14) measure what users come for — the
// documents — on the demo shop (examples/shop) scaled to N customers:
// `decant run` from nothing (BenchmarkInitialLoad), a backlog of live
// changes (BenchmarkLiveBacklog) and the initial load with the Kafka sink
// only (BenchmarkKafkaSinkOnly), each next to its ceiling measured in the
// same run on the same data. decant runs as a child process, as users run
// it. DECANT_BENCH_DOCS_CUSTOMERS sets N (default 5000; `make bench` uses
// 100000), DECANT_BENCH_DOCS_LOG keeps decant's log in that file,
// DECANT_BENCH_BULK_BYTES and DECANT_BENCH_BULK_REQUESTS set decant's
// indexer.bulk_bytes and indexer.bulk_requests (default: decant's), and
// DECANT_BENCH_PROFILE_DIR records profiles (docsProfile).
//
//	DECANT_BENCH_DOCS_CUSTOMERS=100000 go test ./e2e -run '^$' -bench '^BenchmarkInitialLoad$' -benchtime 1x -timeout 60m

// docsScale rewrites the sizes of examples/shop/schema.sql's data (10,000
// customers) for n customers, keeping its ratios: 0.8 addresses and 3
// orders per customer, 1–4 lines per order, 500 products, 5 tags. Each
// size must appear exactly as expected, so that a change to the example
// fails here rather than seeding something else.
var docsScale = []struct{ old, new string }{
	{"generate_series(1, 8000)", "generate_series(1, {A})"},
	{"1 + g % 8000", "1 + g % {A}"},
	{"generate_series(1, 10000)", "generate_series(1, {N})"},
	{"1 + g % 10000", "1 + g % {N}"},
	{"generate_series(1, 30000)", "generate_series(1, {O})"},
}

// docsTables are the demo's tables, all published (the mapping uses each).
var docsTables = []string{"addresses", "customers", "products", "orders", "order_lines", "tags", "customer_tags"}

// docsSeed creates the demo schema (the DDL of examples/shop/schema.sql),
// fills it for n customers, vacuums, analyzes and checkpoints, and returns
// the number of rows in the published tables.
// docsRepoFile reads a file of the repository, path relative to its root.
func docsRepoFile(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), path))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func docsSeed(tb testing.TB, pg *testenv.PG, n int) int64 {
	tb.Helper()
	schema := docsRepoFile(tb, "examples/shop/schema.sql")
	for _, r := range docsScale {
		if strings.Count(schema, r.old) != 1 {
			tb.Fatalf("examples/shop/schema.sql: want %q once to scale the demo, found it %d times", r.old, strings.Count(schema, r.old))
		}
		schema = strings.Replace(schema, r.old, r.new, 1)
	}
	started := time.Now()
	pg.Exec(tb, strings.NewReplacer("{N}", strconv.Itoa(n), "{A}", strconv.Itoa(max(1, n*8/10)), "{O}", strconv.Itoa(3*n)).Replace(schema))
	// Vacuumed and checkpointed now, so that autovacuum and the
	// checkpointer do not work on the new rows during a timed run.
	pg.Exec(tb, "VACUUM ANALYZE")
	pg.Exec(tb, "CHECKPOINT")
	var rows int64
	for _, t := range docsTables {
		var c int64
		if err := pg.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+t).Scan(&c); err != nil {
			tb.Fatal(err)
		}
		rows += c
	}
	tb.Logf("seeded the demo shop with %d customers: %d rows in %s", n, rows, time.Since(started).Round(time.Millisecond))
	return rows
}

// docsBench is one documents benchmark's servers, decant binary, working
// directory and mapping.
type docsBench struct {
	n       int
	rows    int64 // source rows in the published tables
	pg      *testenv.PG
	k       *testenv.KafkaEnv
	es      *testenv.ESEnv
	bin     string
	dir     string
	alias   string
	mapping string
	agg     *mappings.Aggregate
	// warmDocs, when set, are the documents warmUp loads instead of
	// building docsWarmDocs of its own (a benchmark that holds them).
	warmDocs []wire.Document
}

// docsSetup seeds n customers and writes examples/shop/mappings/shop.yaml
// with a unique alias into a working directory.
func docsSetup(b *testing.B, n int) *docsBench {
	b.Helper()
	d := &docsBench{n: n, pg: testenv.Postgres(b), k: testenv.Kafka(b), es: testenv.Elasticsearch(b), dir: b.TempDir()}
	d.bin = testenv.Decant(b)
	d.rows = docsSeed(b, d.pg, n)
	d.alias = d.es.Prefix + "-customer"
	shop := docsRepoFile(b, "examples/shop/mappings/shop.yaml")
	d.mapping = strings.Replace(shop, "\n    elasticsearch:\n", "\n    elasticsearch:\n      index: "+d.alias+"\n", 1)
	if d.mapping == shop {
		b.Fatal("examples/shop/mappings/shop.yaml: no `    elasticsearch:` block to name the index in")
	}
	if err := os.MkdirAll(filepath.Join(d.dir, "mappings"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, "mappings", "shop.yaml"), []byte(d.mapping), 0o644); err != nil {
		b.Fatal(err)
	}
	d.agg = benchModel(b, d.pg, d.mapping).Aggregate("customer")
	return d
}

// config writes a decant config named name for a new slot and the topic
// prefix prefix; esURL "" turns the Elasticsearch sink off, listen "" the
// HTTP port.
func (d *docsBench) config(b *testing.B, name, prefix, esURL, listen string) string {
	b.Helper()
	urls := "[]"
	if esURL != "" {
		urls = "[" + esURL + "]"
	}
	path := filepath.Join(d.dir, name)
	if err := os.WriteFile(path, fmt.Appendf(nil, `postgres:
  dsn: %s
  slot: decant_%s
kafka:
  brokers: [%s]
  topic_prefix: %s
elasticsearch:
  urls: %s
mappings: [mappings/*.yaml]
http:
  listen: %q
indexer:
  bulk_bytes: %d
  bulk_requests: %d
`, d.pg.DSN, testenv.Suffix(), strings.Join(d.k.Brokers, ","), prefix, urls, listen,
		benchEnvInt("DECANT_BENCH_BULK_BYTES", 5<<20), benchEnvInt("DECANT_BENCH_BULK_REQUESTS", 4)), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// logPath is where a child process named name logs: DECANT_BENCH_DOCS_LOG
// (suffixed with name) or the working directory.
func (d *docsBench) logPath(name string) string {
	if v := os.Getenv("DECANT_BENCH_DOCS_LOG"); v != "" {
		return v + "." + name
	}
	return filepath.Join(d.dir, name+".log")
}

// docsSnapshotDone is the streamer's log message once every snapshot row
// is acknowledged by Kafka.
const docsSnapshotDone = "initial snapshot complete"

var docsTook = regexp.MustCompile(`took=(\S+)`)

// docsLogged returns the first line of p's log containing msg, or "".
func docsLogged(p *testenv.Proc, msg string) string {
	b := []byte(p.Output())
	i := bytes.Index(b, []byte(msg))
	if i < 0 {
		return ""
	}
	line := b[bytes.LastIndexByte(b[:i], '\n')+1:]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	return string(line)
}

// docsSnapshotTook returns the took= of the streamer's snapshot-complete
// line, 0 when absent.
func docsSnapshotTook(p *testenv.Proc) time.Duration {
	m := docsTook.FindStringSubmatch(docsLogged(p, docsSnapshotDone))
	if m == nil {
		return 0
	}
	d, _ := time.ParseDuration(m[1])
	return d
}

var docsTime = regexp.MustCompile(`^time=(\S+)`)

// docsLoggedSince returns how long after start p logged msg first (from
// the line's time=), 0 when it did not.
func docsLoggedSince(p *testenv.Proc, msg string, start time.Time) time.Duration {
	m := docsTime.FindStringSubmatch(docsLogged(p, msg))
	if m == nil {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		return 0
	}
	return t.Sub(start)
}

// docsLoadFinished is decant run's log message once it gave a loaded
// index its mapping's settings back (finishLoads).
const docsLoadFinished = "initial load complete"

// docsSlotCreated is the streamer's log message once its slot exists:
// creating a slot waits for every transaction running on the server to
// end, which on a shared server can take seconds.
const docsSlotCreated = "created replication slot"

// docsLag returns how many records of topics group has not committed
// (a partition without a commit counts whole). A topic that does not exist
// yet is an error.
func docsLag(ctx context.Context, adm *kadm.Client, group string, topics ...string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return 0, err
	}
	if err := ends.Error(); err != nil {
		return 0, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, err
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			at = c.At
		}
		lag += max(0, o.Offset-at)
	})
	return lag, nil
}

// docsEndOffsets returns the sum of the end offsets of topics.
func docsEndOffsets(ctx context.Context, adm *kadm.Client, topics ...string) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return 0, err
	}
	if err := ends.Error(); err != nil {
		return 0, err
	}
	var sum int64
	ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	return sum, nil
}

// docsRawTopics returns the raw topics of prefix.
func docsRawTopics(prefix string) []string {
	ts := make([]string, len(docsTables))
	for i, t := range docsTables {
		ts[i] = wire.RawTopic(prefix, "public", t)
	}
	return ts
}

// waitLoaded waits until decant run (run, on topic prefix d.k.Prefix) has
// finished its initial load: the streamer logged its snapshot complete,
// the map group has committed every raw record, the build group every
// ref, and then docsReady (the sink's own check) holds.
func (d *docsBench) waitLoaded(b *testing.B, run *testenv.Proc, docsReady func() (bool, error)) {
	b.Helper()
	d.waitLoadedAt(b, run, d.k.Prefix, docsReady)
}

// waitLoadedAt is waitLoaded for a decant run on topic prefix prefix. It
// returns when it first saw the snapshot complete and both groups with
// nothing left: the pipeline's work done, before docsReady held.
func (d *docsBench) waitLoadedAt(b *testing.B, run *testenv.Proc, prefix string, docsReady func() (bool, error)) (built time.Time) {
	b.Helper()
	ctx := testenv.Ctx(b)
	refs := wire.RefsTopic(prefix, "customer")
	testenv.WaitFor(b, fmt.Sprintf("decant run's initial load of %d documents", d.n), 60*time.Minute, func() (bool, error) {
		if run.Exited() {
			b.Fatalf("decant run exited; log:\n%s", run.Tail(40))
		}
		if docsLogged(run, docsSnapshotDone) == "" {
			return false, fmt.Errorf("no %q in the log yet", docsSnapshotDone)
		}
		if lag, err := docsLag(ctx, d.k.Admin, prefix+".map", docsRawTopics(prefix)...); err != nil || lag > 0 {
			return false, fmt.Errorf("map group: lag %d (%v)", lag, err)
		}
		if lag, err := docsLag(ctx, d.k.Admin, prefix+".build", refs); err != nil || lag > 0 {
			return false, fmt.Errorf("build group: lag %d (%v)", lag, err)
		}
		if built.IsZero() {
			built = time.Now()
		}
		return docsReady()
	})
	return built
}

// docsExport reads the documents of alias matching query (a JSON query
// clause), sorted by id, and fails unless there are want of them.
func docsExport(ctx context.Context, es *testenv.ESEnv, alias, query string, want int) ([]wire.Document, error) {
	const page = 5000
	docs := make([]wire.Document, 0, want)
	var after json.RawMessage
	for {
		body := map[string]any{"size": page, "query": json.RawMessage(query), "sort": []any{map[string]any{"id": "asc"}}}
		if after != nil {
			body["search_after"] = after
		}
		bb, _ := json.Marshal(body)
		res, err := esapi.SearchRequest{Index: []string{alias}, Body: bytes.NewReader(bb)}.Do(ctx, es.Client)
		if err != nil {
			return nil, err
		}
		var sr struct {
			Hits struct {
				Hits []struct {
					ID     string          `json:"_id"`
					Source json.RawMessage `json:"_source"`
					Sort   json.RawMessage `json:"sort"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if res.IsError() {
			res.Body.Close()
			return nil, fmt.Errorf("export %s: %s", alias, res.String())
		}
		err = json.NewDecoder(res.Body).Decode(&sr)
		res.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("export %s: %w", alias, err)
		}
		for _, h := range sr.Hits.Hits {
			docs = append(docs, wire.Document{Aggregate: "customer", ID: json.RawMessage(`{"id":` + h.ID + `}`), Version: 1, Doc: wire.AppendCompact(nil, h.Source)})
		}
		if len(sr.Hits.Hits) < page {
			break
		}
		after = sr.Hits.Hits[len(sr.Hits.Hits)-1].Sort
	}
	if len(docs) != want {
		return nil, fmt.Errorf("export %s: %d documents match %s, want %d", alias, len(docs), query, want)
	}
	return docs, nil
}

// docsBulk is one direct bulk load: requests of mb MB, workers in flight.
type docsBulk struct {
	mb, workers int
	took        time.Duration
	cpu         string  // the servers' CPU over the load (serverCPU.since)
	cpuSum      float64 // its sum, seconds
	es          string  // Elasticsearch's work over the load (esNodeStats.since)
	jit         string  // the JVMs' JIT compilers' CPU over the load (readJITCPU)
}

func (l docsBulk) String() string { return fmt.Sprintf("%dMBx%d", l.mb, l.workers) }

// plainVersusVersioned asks whether decant's versioned writes through an
// alias cost Elasticsearch more than plain ones: it loads docs four times,
// plain, as decant writes them (external_gte versions, require_alias),
// again versioned, again plain, in requests of mb MB × workers, each timed
// up to its refresh. target gives load i its destination (the version to
// write, 0 for plain; the index to refresh; what to do after it). It
// returns the plain loads, then the versioned ones.
func (d *docsBench) plainVersusVersioned(b *testing.B, docs []wire.Document, mb, workers int, target func(i int, versioned bool) (dest string, version int64, refresh string, done func())) [2][]docsBulk {
	b.Helper()
	ctx := testenv.Ctx(b)
	var ab [2][]docsBulk
	for i, versioned := range []bool{false, true, true, false} {
		dest, version, refresh, done := target(i, versioned)
		resWaitESQuiet(b, d.es)
		start, cpu0 := time.Now(), readServerCPU()
		if err := idxBulkLoadAs(ctx, d.es, dest, docs, mb<<20, workers, version); err != nil {
			b.Fatalf("bulk load into %s (versioned %v): %v", dest, versioned, err)
		}
		docsRefresh(b, d.es, refresh)
		l := docsBulk{mb: mb, workers: workers, took: time.Since(start)}
		l.cpu, l.cpuSum = readServerCPU().since(cpu0)
		done()
		k := 0
		if versioned {
			k = 1
		}
		ab[k] = append(ab[k], l)
	}
	return ab
}

// docsABCells describes plainVersusVersioned's loads for a log line.
func docsABCells(ab [2][]docsBulk) string {
	var cells []string
	for k, name := range []string{"plain", "versioned"} {
		for _, l := range ab[k] {
			cells = append(cells, fmt.Sprintf("%s %.2fs (%s)", name, l.took.Seconds(), l.cpu))
		}
	}
	return strings.Join(cells, ", ")
}

// freshIndex creates a new index with the aggregate's settings and
// mappings behind an alias named name, and returns the concrete index.
// With load it is set up for a bulk load (refresh off, no replicas), as
// decant's first start sets up its own; without, it has the settings of a
// live index, which decant's live changes and backfills write to.
func (d *docsBench) freshIndex(b *testing.B, name string, load bool) string {
	b.Helper()
	spec := indexer.SpecFor(d.agg, true)
	spec.Alias = name
	var index string
	var err error
	if load {
		index, _, err = indexer.EnsureLoadIndex(testenv.Ctx(b), d.es.Client, spec)
	} else {
		index, err = indexer.EnsureIndex(testenv.Ctx(b), d.es.Client, spec)
	}
	if err != nil {
		b.Fatal(err)
	}
	return index
}

func (d *docsBench) deleteIndex(b *testing.B, index string) {
	b.Helper()
	res, err := esapi.IndicesDeleteRequest{Index: []string{index}}.Do(testenv.Ctx(b), d.es.Client)
	if err != nil {
		b.Fatal(err)
	}
	res.Body.Close()
}

// bulkGrid loads docs into a fresh index (same settings and mappings as
// decant's) once per cell of the grid — requests of 1, 5 and 10 MB × 2,
// 4 and 8 in flight — each after Elasticsearch is flushed and done merging,
// and returns the fastest: the direct load's ceiling. load is freshIndex's.
func (d *docsBench) bulkGrid(b *testing.B, docs []wire.Document, load bool) (best docsBulk, grid []docsBulk) {
	b.Helper()
	ctx := testenv.Ctx(b)
	for _, mb := range []int{1, 5, 10} {
		for _, w := range []int{2, 4, 8} {
			index := d.freshIndex(b, fmt.Sprintf("%s-grid-%d-%d", d.es.Prefix, mb, w), load)
			resWaitESQuiet(b, d.es)
			start, cpu0, es0, jit0 := time.Now(), readServerCPU(), readESStats(d.es), readJITCPU()
			if err := idxBulkLoad(ctx, d.es, index, docs, mb<<20, w); err != nil {
				// Elasticsearch refused part of the load (429: its write
				// queue is full): a load that drops documents is no ceiling.
				b.Logf("direct bulk load in requests of %d MB × %d in flight refused documents, left out of the grid: %v", mb, w, err)
				d.deleteIndex(b, index)
				continue
			}
			docsRefresh(b, d.es, index)
			l := docsBulk{mb: mb, workers: w, took: time.Since(start)}
			l.cpu, l.cpuSum = readServerCPU().since(cpu0)
			l.es = readESStats(d.es).since(es0)
			l.jit, _ = readJITCPU().since(jit0)
			grid = append(grid, l)
			if best.took == 0 || l.took < best.took {
				best = l
			}
			d.deleteIndex(b, index)
		}
	}
	var cells []string
	for _, l := range grid {
		cells = append(cells, fmt.Sprintf("%s %.2fs", l, l.took.Seconds()))
	}
	b.Logf("direct bulk load of %d documents: %s; best %s", len(docs), strings.Join(cells, ", "), best)
	return best, grid
}

// docsTimedLoads is how many timed initial loads BenchmarkInitialLoad
// runs; it reports the median. One load against the next on the same
// servers moved by up to a quarter (docs/performance.md, "Thirtieth
// pass"), as one backfill against the next did (BenchmarkBackfill).
const docsTimedLoads = 3

// docsLoad is what one timed initial load measured: its time, decant's
// and the servers' CPU over it, Elasticsearch's work and the JIT
// compilers' CPU, when the slot and the snapshot were done, and what
// decant's own metrics counted (bulk requests and parts, map batches,
// build statements, Kafka requests).
type docsLoad struct {
	took, slot, snapshot                    time.Duration
	built, finished                         time.Duration // the groups done (waitLoadedAt); the index's settings restored (docsLoadFinished)
	cpu, serversSum                         float64
	servers, esWork, jit, kafkaRequests     string
	requests, parts, mapBatches, statements float64
}

// timedLoad runs `decant run --config config` from nothing (topic prefix
// prefix, its index behind alias, its HTTP port on addr) until its
// initial load is done, measures it (docsLoad) and stops it. profile
// takes decant's profiles over it (docsProfile).
func (d *docsBench) timedLoad(b *testing.B, config, prefix, alias, addr, logName string, profile bool) docsLoad {
	b.Helper()
	ctx := testenv.Ctx(b)
	resWaitESQuiet(b, d.es)
	start, servers0, es0, jit0 := time.Now(), readServerCPU(), readESStats(d.es), readJITCPU()
	run := testenv.Start(b, "decant run", d.logPath(logName), testenv.DecantCmd(b, nil, "run", "--config", config))
	var profiled <-chan struct{}
	if profile {
		profiled = docsProfile(b, addr, "initial-load", benchEnvInt("DECANT_BENCH_PROFILE_SECONDS", 20))
	}
	built := d.waitLoadedAt(b, run, prefix, func() (bool, error) {
		c, err := freshCount(ctx, d.es, alias, `{"match_all":{}}`)
		return c == d.n, fmt.Errorf("%d documents (%v)", c, err)
	})
	l := docsLoad{took: time.Since(start), cpu: freshCPU(b, run.Pid()), built: built.Sub(start)}
	l.servers, l.serversSum = readServerCPU().since(servers0)
	l.esWork = readESStats(d.es).since(es0)
	l.jit, _ = readJITCPU().since(jit0)
	l.snapshot, l.slot = docsSnapshotTook(run), docsLoggedSince(run, docsSlotCreated, start)
	l.requests, l.parts = docsBulkRequests(addr)
	l.mapBatches, _ = resMetric(addr, "decant_resolver_map_batch_seconds_count")
	l.statements, _ = resMetric(addr, "decant_resolver_build_statement_seconds_count")
	l.kafkaRequests = docsKafkaRequests(addr)
	if profiled != nil {
		<-profiled
	}
	if code := run.Term(60 * time.Second); code != 0 {
		b.Fatalf("decant run exited %d after SIGTERM; log:\n%s", code, run.Tail(40))
	}
	// Read once the log is whole: the count can reach N while decant is
	// still logging it (the refresh comes with the settings).
	l.finished = docsLoggedSince(run, docsLoadFinished, start)
	b.Logf("timed initial load %s: %.2fs (built %.2fs, settings restored %.2fs, snapshot %.2fs), CPU %s,decant:%.1f",
		logName, l.took.Seconds(), l.built.Seconds(), l.finished.Seconds(), l.snapshot.Seconds(), l.servers, l.cpu)
	return l
}

// BenchmarkInitialLoad times `decant run` from nothing — a new slot, new
// topics, no index — on the demo shop scaled to N customers, until the
// streamer's snapshot is complete, the map and build groups have nothing
// left and Elasticsearch counts N documents behind the alias. After the
// untimed loads that warm the JVMs up (untimedLoads) it runs
// docsTimedLoads such loads, each from nothing, and reports the median
// (decant_timed_seconds lists them all; the CPU and counts printed are the
// median load's). With DECANT_BENCH_PROFILE_DIR the last one is profiled.
//
// The ceiling is measured in the same run on the same data, after decant
// stopped: the streamer's raw snapshot of the same tables (`decant stream`
// alone with a new slot and topic prefix, until it logs its snapshot
// complete) and a direct bulk load of the same N documents (exported from
// decant's index) into a fresh index with the same settings and mappings,
// started together, side by side, until both are done. Each cell of a
// grid (requests of 1/5/10 MB × 2/4/8 in flight) is first measured alone;
// the three fastest and the fastest with the most in flight then run side
// by side with the snapshot, each on new topics and a new index, and the
// ceiling is the fastest of those runs (sideBySideCells).
// ratio = ceiling seconds ÷ decant seconds.
// It prints one line starting with "BENCH initial load".
//
//	DECANT_BENCH_DOCS_CUSTOMERS=100000 go test ./e2e -run '^$' -bench '^BenchmarkInitialLoad$' -benchtime 1x -timeout 60m
func BenchmarkInitialLoad(b *testing.B) {
	d := docsSetup(b, benchEnvInt("DECANT_BENCH_DOCS_CUSTOMERS", 5000))
	d.warmUp(b, true)
	first := d.untimedLoads(b)
	ctx := testenv.Ctx(b)
	// The timed loads: each on a new slot, new topics and an index of its
	// own; the last on d's, whose documents the ceiling loads.
	loads := make([]docsLoad, docsTimedLoads)
	for i := range loads {
		if i < len(loads)-1 {
			k := testenv.Kafka(b)
			alias := fmt.Sprintf("%s-timed%d", d.alias, i)
			addr := testenv.FreePort(b)
			loads[i] = d.timedLoad(b, d.configFor(b, fmt.Sprintf("timed%d", i), alias, k.Prefix, addr), k.Prefix, alias, addr, fmt.Sprintf("timed%d", i), false)
			d.dropLoad(b, alias, k)
			continue
		}
		addr := testenv.FreePort(b)
		loads[i] = d.timedLoad(b, d.config(b, "run.yaml", d.k.Prefix, d.es.URL, addr), d.k.Prefix, d.alias, addr, "run", true)
	}
	var times []string
	for _, l := range loads {
		times = append(times, fmt.Sprintf("%.2f", l.took.Seconds()))
	}
	med := slices.Clone(loads)
	slices.SortFunc(med, func(x, y docsLoad) int { return cmp.Compare(x.took, y.took) })
	l := med[len(med)/2]
	took, cpu := l.took, l.cpu
	docs, err := docsExport(ctx, d.es, d.alias, `{"match_all":{}}`, d.n)
	if err != nil {
		b.Fatal(err)
	}
	var size int
	for i := range docs {
		size += len(docs[i].Doc)
	}
	// Done with decant's topics: left in place, Kafka worked on them
	// through the ceiling's loads (measured as more Kafka and
	// Elasticsearch CPU in the ceiling's runs).
	if err := d.k.DeleteTopics(); err != nil {
		b.Fatal(err)
	}

	// The ceiling: first the grid alone, then the raw snapshot and the
	// best bulk load side by side.
	// decant's first start loads its index with refresh off and no
	// replicas (indexer.bulk_load_settings): so does the ceiling.
	best, grid := d.bulkGrid(b, docs, true)
	// Elasticsearch used more CPU for decant's load than for the direct
	// one: is it the versioned writes? The same documents into fresh
	// load indexes, plain and as decant writes them, at the grid's best.
	ab := d.plainVersusVersioned(b, docs, best.mb, best.workers, func(i int, versioned bool) (string, int64, string, func()) {
		alias := fmt.Sprintf("%s-ab%d", d.es.Prefix, i)
		index := d.freshIndex(b, alias, true)
		done := func() { d.deleteIndex(b, index) }
		if versioned {
			return alias, int64(1) << 40, index, done
		}
		return index, 0, index, done
	})
	b.Logf("the same %d documents into fresh load indexes, plain and as decant writes them: %s", len(docs), docsABCells(ab))
	// Side by side, the raw snapshot takes CPU from Elasticsearch: the
	// cell fastest alone need not be fastest beside it (more requests in
	// flight can keep the cores busier). Each candidate runs side by side
	// on new topics and a new index; the ceiling is the fastest.
	var side sideBySide
	var sides []string
	for _, cell := range sideBySideCells(grid) {
		s := d.snapshotBesideBulk(b, docs, cell)
		sides = append(sides, fmt.Sprintf("%s %.2fs (stream %.2fs, bulk %.2fs)", cell, s.took().Seconds(), s.streamTook.Seconds(), s.bulkTook.Seconds()))
		if side.cell.took == 0 || s.took() < side.took() {
			side = s
		}
	}
	b.Logf("raw snapshot ‖ direct bulk load of %d documents: %s; best %s", len(docs), strings.Join(sides, ", "), side.cell)
	ceiling := side.took()

	ours, theirs := float64(d.n)/took.Seconds(), float64(d.n)/ceiling.Seconds()
	b.ReportMetric(ours, "docs/s")
	b.ReportMetric(theirs, "ceiling-docs/s")
	b.ReportMetric(ours/theirs, "ratio")
	fmt.Printf("BENCH initial load docs=%d source_rows=%d doc_bytes=%d decant=%.0f docs/s (%.2fs) ceiling=%.0f docs/s (%.2fs: raw snapshot ‖ direct bulk %s) ratio=%.2f decant_seconds=%.2f decant_timed_seconds=%s decant_untimed_seconds=%.2f decant_slot_seconds=%.2f decant_snapshot_seconds=%.2f decant_built_seconds=%.2f decant_finished_seconds=%.2f decant_cpu_seconds=%.1f ceiling_seconds=%.2f raw_snapshot_seconds=%.2f raw_snapshot_slot_seconds=%.2f direct_bulk_seconds=%.2f direct_bulk_alone=%s/%.2fs side_by_side_cells=%d cpu_decant_run=%s,decant:%.1f cpu_decant_run_busy=%.2f ratio_at_full_cpu=%.2f cpu_ceiling=%s,stream:%.1f cpu_ceiling_busy=%.2f bulk_requests=%.0f bulk_parts=%.0f map_batches=%.0f build_statements=%.0f kafka_requests=%s plain_fresh_seconds=%.2f/%.2f versioned_fresh_seconds=%.2f/%.2f cpu_plain=%s/%s cpu_versioned=%s/%s es_work_decant=%s es_work_ceiling=%s jit_decant_run=%s jit_ceiling=%s\n",
		d.n, d.rows, size/d.n, ours, took.Seconds(), theirs, ceiling.Seconds(), side.cell, ours/theirs, took.Seconds(), strings.Join(times, "/"), first.Seconds(), l.slot.Seconds(), l.snapshot.Seconds(), l.built.Seconds(), l.finished.Seconds(), cpu,
		ceiling.Seconds(), side.streamTook.Seconds(), side.streamSlot.Seconds(), side.bulkTook.Seconds(), best, best.took.Seconds(), len(sides),
		l.servers, cpu, cpuBusy(l.serversSum+cpu, took), atFullCPU(ceiling, l.serversSum+cpu),
		side.servers, side.streamCPU, cpuBusy(side.serversSum+side.streamCPU, ceiling), l.requests, l.parts, l.mapBatches, l.statements, l.kafkaRequests,
		ab[0][0].took.Seconds(), ab[0][1].took.Seconds(), ab[1][0].took.Seconds(), ab[1][1].took.Seconds(),
		ab[0][0].cpu, ab[0][1].cpu, ab[1][0].cpu, ab[1][1].cpu, l.esWork, side.es, cmp.Or(l.jit, "none"), cmp.Or(side.jit, "none"))
}

// sideBySide is one run of the initial load's ceiling: the raw snapshot
// and a direct bulk load in requests of cell, started together.
type sideBySide struct {
	cell                             docsBulk
	streamTook, streamSlot, bulkTook time.Duration
	servers                          string  // the servers' CPU over the run
	serversSum, streamCPU            float64 // its sum, and decant stream's, seconds
	es                               string  // Elasticsearch's work over the run
	jit                              string  // the JVMs' compilers' CPU over the run (readJITCPU)
}

// took is the run's time: until both are done.
func (s sideBySide) took() time.Duration { return max(s.streamTook, s.bulkTook) }

// sideBySideCells picks the grid's cells to run beside the raw snapshot:
// the three fastest alone and the fastest with the most requests in
// flight, which may gain the most when the snapshot competes for the
// cores.
func sideBySideCells(grid []docsBulk) []docsBulk {
	sorted := slices.Clone(grid)
	slices.SortFunc(sorted, func(a, b docsBulk) int { return cmp.Compare(a.took, b.took) })
	cells := slices.Clip(sorted[:min(3, len(sorted))])
	most := 0
	for _, l := range sorted {
		most = max(most, l.workers)
	}
	for _, l := range sorted {
		if l.workers == most {
			if !slices.ContainsFunc(cells, func(c docsBulk) bool { return c.mb == l.mb && c.workers == l.workers }) {
				cells = append(cells, l)
			}
			break
		}
	}
	return cells
}

// snapshotBesideBulk starts `decant stream` (a new slot, new topics,
// created compacted before the clock starts) and the direct bulk load of
// docs into a new load index in requests of cell together, and times both
// until done.
func (d *docsBench) snapshotBesideBulk(b *testing.B, docs []wire.Document, cell docsBulk) sideBySide {
	b.Helper()
	ctx := testenv.Ctx(b)
	k := testenv.Kafka(b)
	streamConfig := d.config(b, fmt.Sprintf("stream-%s.yaml", cell), k.Prefix, "", "")
	// The raw topics and the state topic exist, compacted as the streamer
	// creates them, before the clock starts: producing to a topic created
	// a moment before can wait for a metadata refresh (up to 5 s, seen
	// between the slot and the first snapshot row), which is not the
	// snapshot's work and would lower the ceiling.
	compact := "compact"
	cleanup := map[string]*string{"cleanup.policy": &compact}
	created, err := k.Admin.CreateTopics(ctx, 6, 1, cleanup, docsRawTopics(k.Prefix)...)
	if err == nil {
		err = created.Error()
	}
	if err == nil {
		created, err = k.Admin.CreateTopics(ctx, 1, 1, cleanup, wire.StateTopic(k.Prefix))
	}
	if err == nil {
		err = created.Error()
	}
	if err != nil {
		b.Fatal(err)
	}
	index := d.freshIndex(b, fmt.Sprintf("%s-direct-%s", d.es.Prefix, strings.ToLower(cell.String())), true)
	resWaitESQuiet(b, d.es)
	s := sideBySide{cell: cell}
	bulkDone := make(chan error, 1)
	start, servers0, es0, jit0 := time.Now(), readServerCPU(), readESStats(d.es), readJITCPU()
	stream := testenv.Start(b, "decant stream", d.logPath("stream-"+cell.String()), testenv.DecantCmd(b, nil, "stream", "--config", streamConfig))
	go func() {
		err := idxBulkLoad(ctx, d.es, index, docs, cell.mb<<20, cell.workers)
		if err == nil {
			docsRefresh(b, d.es, index)
		}
		s.bulkTook = time.Since(start)
		bulkDone <- err
	}()
	testenv.WaitFor(b, "decant stream's snapshot", 60*time.Minute, func() (bool, error) {
		if stream.Exited() {
			b.Fatalf("decant stream exited; log:\n%s", stream.Tail(40))
		}
		return docsLogged(stream, docsSnapshotDone) != "", fmt.Errorf("no %q in the log yet", docsSnapshotDone)
	})
	s.streamTook = time.Since(start)
	s.streamSlot = docsLoggedSince(stream, docsSlotCreated, start)
	if err := <-bulkDone; err != nil {
		b.Fatalf("direct bulk load in requests of %s beside the raw snapshot: %v", cell, err)
	}
	s.servers, s.serversSum = readServerCPU().since(servers0)
	s.es = readESStats(d.es).since(es0)
	s.jit, _ = readJITCPU().since(jit0)
	s.streamCPU = freshCPU(b, stream.Pid())
	if code := stream.Term(60 * time.Second); code != 0 {
		b.Fatalf("decant stream exited %d after SIGTERM; log:\n%s", code, stream.Tail(40))
	}
	if got, err := docsEndOffsets(ctx, k.Admin, docsRawTopics(k.Prefix)...); err != nil || got < d.rows {
		b.Fatalf("decant stream's raw topics hold %d records (%v), want at least %d", got, err, d.rows)
	}
	if c, err := freshCount(ctx, d.es, index, `{"match_all":{}}`); err != nil || c != d.n {
		b.Fatalf("the direct load's index holds %d documents (%v), want %d", c, err, d.n)
	}
	d.deleteIndex(b, index)
	if err := k.DeleteTopics(); err != nil {
		b.Fatal(err)
	}
	return s
}

// docsLiveMark is the value the live changes write.
const docsLiveMark = "livechanged"

// BenchmarkLiveBacklog times a backlog of live changes through `decant
// run`. After the initial load of N customers (not timed) decant is paused
// with SIGSTOP while K single-row transactions (DECANT_BENCH_LIVE_CHANGES,
// default 2000; `make bench` uses 40000; at most N) are committed from 8
// connections, each changing a different document: change i sets the name
// of customer i+1 when i is even, else the status of one of its orders.
// The clock runs from SIGCONT to `/v1/wait?lsn=` (the LSN after the last
// commit) returning; then both marks are counted in Elasticsearch.
//
// The ceiling is the direct bulk load of the same K documents, exported
// from decant's index, into a copy of that index (a fresh index is
// printed beside it), the fastest cell of the grid (requests of 1/5/10 MB
// × 2/4/8 in flight), each load timed until a refresh has made its
// documents searchable, as /v1/wait does for decant's (docsRefresh). ratio = decant docs/s ÷ ceiling docs/s. Before the
// grid, the same documents go into the copy plain and as decant writes
// them (external_gte versions through an alias), alternating, in requests
// of decant's default size and number, each with every server's CPU: what
// the versioned writes cost Elasticsearch. It prints one line starting
// with "BENCH live backlog".
//
//	DECANT_BENCH_DOCS_CUSTOMERS=100000 DECANT_BENCH_LIVE_CHANGES=40000 go test ./e2e -run '^$' -bench '^BenchmarkLiveBacklog$' -benchtime 1x -timeout 60m
func BenchmarkLiveBacklog(b *testing.B) {
	d := docsSetup(b, benchEnvInt("DECANT_BENCH_DOCS_CUSTOMERS", 5000))
	d.warmUp(b, true)
	changes := min(d.n, benchEnvInt("DECANT_BENCH_LIVE_CHANGES", 2000))
	ctx := testenv.Ctx(b)
	addr := testenv.FreePort(b)
	config := d.config(b, "run.yaml", d.k.Prefix, d.es.URL, addr)
	run := testenv.Start(b, "decant run", d.logPath("run"), testenv.DecantCmd(b, nil, "run", "--config", config))
	defer func() {
		if !run.Exited() {
			_ = run.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	d.waitLoaded(b, run, func() (bool, error) {
		c, err := freshCount(ctx, d.es, d.alias, `{"match_all":{}}`)
		return c == d.n, fmt.Errorf("%d documents (%v)", c, err)
	})
	searched := time.Now()
	cl := opsapi.NewClient("http://" + addr)
	if err := cl.Wait(ctx, freshLSN(b, d.pg), 5*time.Minute); err != nil {
		b.Fatalf("/v1/wait after the initial load: %v", err)
	}
	resWaitESQuiet(b, d.es)
	// The ceiling loads into a copy of the index that nothing searches,
	// and Elasticsearch skips the periodic refreshes of a shard not
	// searched for index.search.idle.after (30 s by default). Decant's
	// index was just counted: left so, it refreshed every second through
	// the drain (10 refreshes and a merge in 11 s, 3 times the ceiling's
	// Elasticsearch CPU) while the ceiling refreshed once. Both start idle.
	if w := docsSearchIdle - time.Since(searched); w > 0 && !ctxtime.Sleep(ctx, w) {
		b.Fatal(ctx.Err())
	}

	pool := freshPool(ctx, b, d.pg.DSN)
	defer pool.Close()
	if err := run.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		b.Fatal(err)
	}
	paused := time.Now()
	if err := docsDriveChanges(ctx, pool, d.n, changes); err != nil {
		b.Fatal(err)
	}
	lsn := freshLSN(b, d.pg)
	if p := time.Since(paused); p > 40*time.Second {
		b.Logf("warning: decant was paused for %s: near PostgreSQL's wal_sender_timeout (60s) and Kafka's session timeout", p.Round(time.Millisecond))
	}
	cpu0, servers0, es0, jit0 := freshCPU(b, run.Pid()), readServerCPU(), readESStats(d.es), readJITCPU()
	start := time.Now()
	if err := run.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		b.Fatal(err)
	}
	req0, parts0 := docsBulkRequests(addr)
	profiled := docsProfile(b, addr, "live-backlog", benchEnvInt("DECANT_BENCH_PROFILE_SECONDS", 10))
	if err := cl.Wait(ctx, lsn, 30*time.Minute); err != nil {
		b.Fatalf("/v1/wait?lsn=%s after %d changes: %v; log:\n%s", lsn, changes, err, run.Tail(40))
	}
	took := time.Since(start)
	cpu := freshCPU(b, run.Pid()) - cpu0
	servers, serversSum := readServerCPU().since(servers0)
	esWork := readESStats(d.es).since(es0)
	jit, _ := readJITCPU().since(jit0)
	req1, parts1 := docsBulkRequests(addr)
	<-profiled
	names, err := freshCount(ctx, d.es, d.alias, `{"match":{"name":"`+docsLiveMark+`"}}`)
	if err != nil {
		b.Fatal(err)
	}
	statuses, err := freshCount(ctx, d.es, d.alias, `{"nested":{"path":"orders","query":{"match":{"orders.status":"`+docsLiveMark+`"}}}}`)
	if err != nil {
		b.Fatal(err)
	}
	if names != (changes+1)/2 || statuses != changes/2 {
		b.Fatalf("after /v1/wait, %d documents hold the new name and %d the new order status, want %d and %d", names, statuses, (changes+1)/2, changes/2)
	}
	if code := run.Term(60 * time.Second); code != 0 {
		b.Fatalf("decant run exited %d after SIGTERM; log:\n%s", code, run.Tail(40))
	}

	docs, err := docsExport(ctx, d.es, d.alias, fmt.Sprintf(`{"range":{"id":{"lte":%d}}}`, changes), changes)
	if err != nil {
		b.Fatal(err)
	}
	// The ceiling: the same K documents bulk-loaded into a copy of
	// decant's index, replacing the documents it holds as decant's writes
	// do (an update costs Elasticsearch more than a first insert: the old
	// document, nested ones included, is deleted too). For comparison,
	// the same documents loaded into a fresh index.
	copyAlias := d.es.Prefix + "-live-copy"
	frozen := d.frozenCopy(b, d.alias, copyAlias+"-frozen")
	clones := 0
	clone := func() string {
		clones++
		return d.cloneOf(b, frozen, copyAlias, clones)
	}
	// Do decant's versioned writes through an alias cost Elasticsearch
	// more than plain ones? The same documents into the same copy, plain
	// and as decant writes them (external_gte versions, require_alias),
	// alternating, requests of decant's default size and count.
	ab := d.plainVersusVersioned(b, docs, 5, 4, func(i int, versioned bool) (string, int64, string, func()) {
		index := clone()
		done := func() { d.deleteIndex(b, index) }
		if versioned {
			return copyAlias, int64(1)<<40 + int64(i)*int64(changes), index, done
		}
		return index, 0, index, done
	})
	b.Logf("the same %d documents into clones of %s, plain and as decant writes them: %s", len(docs), frozen, docsABCells(ab))
	best, _ := d.bulkGridInto(b, docs, clone)
	d.deleteIndex(b, frozen)
	fresh, _ := d.bulkGrid(b, docs, false)
	ours, theirs := float64(changes)/took.Seconds(), float64(changes)/best.took.Seconds()
	b.ReportMetric(ours, "docs/s")
	b.ReportMetric(theirs, "direct-docs/s")
	b.ReportMetric(ours/theirs, "ratio")
	fmt.Printf("BENCH live backlog changes=%d customers=%d decant=%.0f docs/s (%.2fs) direct_bulk=%.0f docs/s (%.2fs, %s, replacing the documents in a copy of the index) ratio=%.2f fresh_bulk=%.0f docs/s (%.2fs, %s, into a fresh index) ratio_fresh=%.2f paused_seconds=%.2f cpu=%.3fs/1k changes bulk_requests=%.0f bulk_parts=%.0f cpu_decant_drain=%s,decant:%.1f cpu_decant_drain_busy=%.2f ratio_at_full_cpu=%.2f cpu_direct_bulk=%s cpu_direct_bulk_busy=%.2f plain_5mbx4_seconds=%.2f/%.2f versioned_5mbx4_seconds=%.2f/%.2f cpu_plain=%s/%s cpu_versioned=%s/%s es_work_decant=%s es_work_direct=%s jit_decant_drain=%s jit_direct=%s\n",
		changes, d.n, ours, took.Seconds(), theirs, best.took.Seconds(), best, ours/theirs,
		float64(changes)/fresh.took.Seconds(), fresh.took.Seconds(), fresh, ours/(float64(changes)/fresh.took.Seconds()),
		start.Sub(paused).Seconds(), cpu*1000/float64(changes), req1-req0, parts1-parts0,
		servers, cpu, cpuBusy(serversSum+cpu, took), atFullCPU(best.took, serversSum+cpu),
		best.cpu, cpuBusy(best.cpuSum, best.took),
		ab[0][0].took.Seconds(), ab[0][1].took.Seconds(), ab[1][0].took.Seconds(), ab[1][1].took.Seconds(),
		ab[0][0].cpu, ab[0][1].cpu, ab[1][0].cpu, ab[1][1].cpu, esWork, best.es, cmp.Or(jit, "none"), cmp.Or(best.jit, "none"))
}

// docsSearchIdle is how long after its last search an Elasticsearch shard
// stops its periodic refreshes (index.search.idle.after, 30 s by default),
// with a margin.
const docsSearchIdle = 32 * time.Second

// copyIndex copies every document of alias into a new index with the
// aggregate's settings and mappings (behind an alias named name; a live
// index's settings), server-side, and returns the concrete index.
func (d *docsBench) copyIndex(b *testing.B, alias, name string) string {
	b.Helper()
	index := d.freshIndex(b, name, false)
	body := fmt.Sprintf(`{"source":{"index":%q},"dest":{"index":%q}}`, alias, index)
	res, err := esapi.ReindexRequest{Body: strings.NewReader(body), WaitForCompletion: esapi.BoolPtr(true), Refresh: esapi.BoolPtr(true)}.Do(testenv.Ctx(b), d.es.Client)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	if res.IsError() {
		b.Fatalf("copy %s into %s: %s", alias, index, res.String())
	}
	return index
}

// frozenCopy copies alias's documents (copyIndex, behind an alias named
// name) and blocks writes to the copy, so that cloneOf can give every
// load of the ceiling a copy in the same state. The first load that
// replaces the documents of an index cost Elasticsearch 1.4 times what
// the next ones did (12.7 CPU-seconds against 7.4–9.2 in one run): loads
// into one copy, one after another, made each later cell of the grid
// cheaper than decant's drain, itself the first to replace the documents
// of its index (docs/performance.md, "Twelfth pass").
func (d *docsBench) frozenCopy(b *testing.B, alias, name string) string {
	b.Helper()
	index := d.copyIndex(b, alias, name)
	res, err := esapi.IndicesPutSettingsRequest{Index: []string{index}, Body: strings.NewReader(`{"index.blocks.write":true}`)}.Do(testenv.Ctx(b), d.es.Client)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	if res.IsError() {
		b.Fatalf("block writes to %s: %s", index, res.String())
	}
	return index
}

// cloneOf clones the frozen index src (frozenCopy) into a new writable
// index behind alias, the n-th, and returns its name. A clone shares
// src's segment files: it is made in about a second, with src's
// segments as they are. It is search-idle from the start
// (index.search.idle.after 0s), as decant's index is when its drain
// starts (docsSearchIdle): a new index is not, and refreshed every second
// through a load (5 refreshes against decant's 1 in one run).
func (d *docsBench) cloneOf(b *testing.B, src, alias string, n int) string {
	b.Helper()
	target := fmt.Sprintf("%s-clone-%d", src, n)
	body := fmt.Sprintf(`{"settings":{"index.blocks.write":null,"index.search.idle.after":"0s"},"aliases":{%q:{}}}`, alias)
	res, err := esapi.IndicesCloneRequest{Index: src, Target: target, Body: strings.NewReader(body), WaitForActiveShards: "1"}.Do(testenv.Ctx(b), d.es.Client)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	if res.IsError() {
		b.Fatalf("clone %s into %s: %s", src, target, res.String())
	}
	return target
}

// bulkGridInto is bulkGrid into existing documents: each cell loads docs
// into an index of its own from next (cloneOf), replacing the documents
// it holds, and deletes it.
func (d *docsBench) bulkGridInto(b *testing.B, docs []wire.Document, next func() string) (best docsBulk, grid []docsBulk) {
	b.Helper()
	ctx := testenv.Ctx(b)
	var index string
	for _, mb := range []int{1, 5, 10} {
		for _, w := range []int{2, 4, 8} {
			index = next()
			l, _, err := d.timedLoadInto(b, index, func(index string) error { return idxBulkLoad(ctx, d.es, index, docs, mb<<20, w) })
			if err != nil {
				b.Logf("direct bulk load into %s in requests of %d MB × %d in flight refused documents, left out of the grid: %v", index, mb, w, err)
				continue
			}
			l.mb, l.workers = mb, w
			grid = append(grid, l)
			if best.took == 0 || l.took < best.took {
				best = l
			}
		}
	}
	var cells []string
	for _, l := range grid {
		cells = append(cells, fmt.Sprintf("%s %.2fs", l, l.took.Seconds()))
	}
	b.Logf("direct bulk load of %d documents into clones like %s: %s; best %s", len(docs), index, strings.Join(cells, ", "), best)
	for _, l := range grid { // what Elasticsearch did in each cell
		b.Logf("  %s %.2fs: CPU %s, JIT %s, %s", l, l.took.Seconds(), l.cpu, cmp.Or(l.jit, "none"), l.es)
	}
	return best, grid
}

// timedLoadInto waits for a quiet Elasticsearch, runs load into index,
// refreshes it unless load failed, and deletes it; it returns the time
// (the refresh included), the servers' CPU, Elasticsearch's work and the
// JIT compilers' CPU over it, and the time of load alone.
func (d *docsBench) timedLoadInto(b *testing.B, index string, load func(index string) error) (l docsBulk, writes time.Duration, err error) {
	b.Helper()
	resWaitESQuiet(b, d.es)
	start, cpu0, es0, jit0 := time.Now(), readServerCPU(), readESStats(d.es), readJITCPU()
	err = load(index)
	writes = time.Since(start)
	if err == nil {
		docsRefresh(b, d.es, index)
	}
	l.took = time.Since(start)
	l.cpu, l.cpuSum = readServerCPU().since(cpu0)
	l.es = readESStats(d.es).since(es0)
	l.jit, _ = readJITCPU().since(jit0)
	d.deleteIndex(b, index)
	return l, writes, err
}

// docsDriveChanges commits count single-row transactions from the pool's
// connections: change i sets customers.name of customer i+1 when i is
// even, else orders.status of an order of customer i+1 (order n+i, whose
// customer_id is 1 + (n+i) mod n as seeded).
func docsDriveChanges(ctx context.Context, pool *pgxpool.Pool, n, count int) error {
	const workers = 8
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := make(chan int, 256)
	for range workers {
		wg.Go(func() {
			for i := range next {
				var err error
				if i%2 == 0 {
					_, err = pool.Exec(ctx, `UPDATE customers SET name = $1 WHERE id = $2`, docsLiveMark, i+1)
				} else {
					_, err = pool.Exec(ctx, `UPDATE orders SET status = $1 WHERE id = $2`, docsLiveMark, n+i)
				}
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, fmt.Errorf("change %d: %w", i, err))
					mu.Unlock()
				}
			}
		})
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// BenchmarkKafkaSinkOnly measures decant's own document pipeline, as it
// is when Elasticsearch runs on other machines: `decant run` with
// `elasticsearch.urls: []` on the demo shop scaled to N customers. After
// the initial load (timed too, until the aggregate topic holds a record
// for every customer), `decant backfill customer` rebuilds every document
// through the refs topic, the build stage and the aggregate topic while
// that `decant run` runs; a round is timed from the command's start to its
// exit (it waits until the build group committed every ref).
//
// The ceiling is PostgreSQL building the same documents: the aggregate's
// Build statement for ids 1..N in batches of 500 as `COPY (…) TO STDOUT`
// into io.Discard on 4 connections, as many as the build stage's workers
// (buildCopyDrain). Backfill and COPY alternate order over
// DECANT_BENCH_KAFKA_ROUNDS rounds (default 2), each side's best round
// counts. ratio = backfill docs/s ÷ COPY docs/s. It prints one line
// starting with "BENCH kafka sink only".
//
//	DECANT_BENCH_DOCS_CUSTOMERS=100000 go test ./e2e -run '^$' -bench '^BenchmarkKafkaSinkOnly$' -benchtime 1x -timeout 60m
func BenchmarkKafkaSinkOnly(b *testing.B) {
	d := docsSetup(b, benchEnvInt("DECANT_BENCH_DOCS_CUSTOMERS", 5000))
	d.warmUp(b, false)
	ctx := testenv.Ctx(b)
	addr := testenv.FreePort(b)
	config := d.config(b, "run.yaml", d.k.Prefix, "", addr)
	topic := wire.AggTopic(d.k.Prefix, "customer")

	start := time.Now()
	run := testenv.Start(b, "decant run", d.logPath("run"), testenv.DecantCmd(b, nil, "run", "--config", config))
	d.waitLoaded(b, run, func() (bool, error) {
		end, err := docsEndOffsets(ctx, d.k.Admin, topic)
		return err == nil && end >= int64(d.n), fmt.Errorf("%s holds %d records (%v)", topic, end, err)
	})
	loadTook := time.Since(start)
	loadCPU := freshCPU(b, run.Pid())
	snapshot := docsSnapshotTook(run)
	keys, records, err := docsDistinctKeys(ctx, d.k, topic)
	if err != nil {
		b.Fatal(err)
	}
	if keys != d.n {
		b.Fatalf("%s holds %d distinct keys (%d records), want %d", topic, keys, records, d.n)
	}

	const batch, workers = 500, 4
	var batches [][]json.RawMessage
	for lo := 1; lo <= d.n; lo += batch {
		var ids []json.RawMessage
		for id := lo; id <= min(d.n, lo+batch-1); id++ {
			ids = append(ids, json.RawMessage(`{"id":`+strconv.Itoa(id)+`}`))
		}
		batches = append(batches, ids)
	}
	// Each round's CPU: every server's, decant run's and the backfill
	// command's (or this process's, which drains the COPY), so that the
	// line can say how busy the cores were and what each side spent.
	type ksRound struct {
		took time.Duration
		cpu  string  // "es:…,kafka:…,pg:…,run:…,backfill:…"
		sum  float64 // all of it, CPU-seconds
		reqs string  // the run's requests to Kafka over the round (docsKafkaRequests)
	}
	copyRound := func() ksRound {
		testenv.HoldFreeMemory(b)
		c, err := buildCopyDrainCPU(ctx, d.pg.DSN, d.agg, batches, workers)
		if err != nil {
			b.Fatal(err)
		}
		if c.rows != int64(d.n) {
			b.Fatalf("COPY drained %d rows, want %d", c.rows, d.n)
		}
		return ksRound{c.took, c.cpu, c.sum, ""}
	}
	backfillRound := func(round int) ksRound {
		testenv.HoldFreeMemory(b)
		cpu0, run0, reqs0 := readServerCPU(), freshCPU(b, run.Pid()), readKafkaRequests(addr)
		before, err := docsEndOffsets(ctx, d.k.Admin, topic)
		if err != nil {
			b.Fatal(err)
		}
		var profiled <-chan struct{}
		if round == 0 { // the run's process: the build stage and the sink
			profiled = docsProfile(b, addr, "kafka-sink-backfill", benchEnvInt("DECANT_BENCH_PROFILE_SECONDS", 5))
		}
		started := time.Now()
		bf := testenv.Start(b, "decant backfill", d.logPath(fmt.Sprintf("backfill-%d", round)), testenv.DecantCmd(b, nil, "backfill", "customer", "--config", config))
		if code := bf.ExitCode(30 * time.Minute); code != 0 {
			b.Fatalf("decant backfill exited %d; log:\n%s", code, bf.Tail(40))
		}
		took := time.Since(started)
		if profiled != nil {
			<-profiled
		}
		servers, sum := readServerCPU().since(cpu0)
		runCPU := freshCPU(b, run.Pid()) - run0
		st := bf.Cmd.ProcessState
		cmdCPU := (st.UserTime() + st.SystemTime()).Seconds()
		after, err := docsEndOffsets(ctx, d.k.Admin, topic)
		if err != nil || after-before < int64(d.n) {
			b.Fatalf("the backfill added %d records to %s (%v), want at least %d", after-before, topic, err, d.n)
		}
		return ksRound{took, fmt.Sprintf("%s,run:%.1f,backfill:%.1f", servers, runCPU, cmdCPU), sum + runCPU + cmdCPU, docsKafkaRequestsSince(readKafkaRequests(addr), reqs0)}
	}
	var backfills, copies []ksRound
	for round := range benchEnvInt("DECANT_BENCH_KAFKA_ROUNDS", 2) {
		if round%2 == 0 {
			backfills = append(backfills, backfillRound(round))
			copies = append(copies, copyRound())
		} else {
			copies = append(copies, copyRound())
			backfills = append(backfills, backfillRound(round))
		}
	}
	cpu := freshCPU(b, run.Pid()) - loadCPU
	if code := run.Term(60 * time.Second); code != 0 {
		b.Fatalf("decant run exited %d after SIGTERM; log:\n%s", code, run.Tail(40))
	}
	byTime := func(x, y ksRound) int { return cmp.Compare(x.took, y.took) }
	best, bestCopy := slices.MinFunc(backfills, byTime), slices.MinFunc(copies, byTime)
	took, copyTook := best.took, bestCopy.took
	seconds := func(rs []ksRound) string {
		var ds []time.Duration
		for _, r := range rs {
			ds = append(ds, r.took)
		}
		return docsSeconds(ds)
	}
	ours, theirs := float64(d.n)/took.Seconds(), float64(d.n)/copyTook.Seconds()
	b.ReportMetric(ours, "docs/s")
	b.ReportMetric(theirs, "copy-docs/s")
	b.ReportMetric(ours/theirs, "ratio")
	fmt.Printf("BENCH kafka sink only docs=%d source_rows=%d decant=%.0f docs/s (%.2fs, decant backfill, best of %d) copy=%.0f docs/s (%.2fs, batches of %d on %d connections, best of %d) ratio=%.2f backfill_seconds=%s copy_seconds=%s backfill_cpu_seconds=%.1f cpu_backfill=%s cpu_backfill_busy=%.2f ratio_at_full_cpu=%.2f cpu_copy=%s cpu_copy_busy=%.2f kafka_requests_backfill=%s initial_load=%.0f docs/s initial_load_seconds=%.2f initial_load_ratio=%.2f decant_snapshot_seconds=%.2f initial_load_cpu_seconds=%.1f\n",
		d.n, d.rows, ours, took.Seconds(), len(backfills), theirs, copyTook.Seconds(), batch, workers, len(copies), ours/theirs,
		seconds(backfills), seconds(copies), cpu, best.cpu, cpuBusy(best.sum, took), atFullCPU(copyTook, best.sum),
		bestCopy.cpu, cpuBusy(bestCopy.sum, copyTook), best.reqs, float64(d.n)/loadTook.Seconds(), loadTook.Seconds(), copyTook.Seconds()/loadTook.Seconds(), snapshot.Seconds(), loadCPU)
}

// docsSeconds lists durations as seconds, "12.30/11.90".
func docsSeconds(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%.2f", d.Seconds()))
	}
	return strings.Join(s, "/")
}

// docsDistinctKeys reads topic from its start to its current end offsets
// and returns the number of distinct keys and of records.
func docsDistinctKeys(ctx context.Context, k *testenv.KafkaEnv, topic string) (int, int, error) {
	ends, err := k.Admin.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, 0, err
	}
	if err := ends.Error(); err != nil {
		return 0, 0, err
	}
	from := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition → end offset not reached yet
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			from[o.Partition] = kgo.NewOffset().AtStart()
			left[o.Partition] = o.Offset
		}
	})
	if len(left) == 0 {
		return 0, 0, nil
	}
	cl, err := kgo.NewClient(append(wire.CommittedReader(), kgo.SeedBrokers(k.Brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))...)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	keys := map[string]struct{}{}
	records := 0
	for len(left) > 0 {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = cmp.Or(ferr, err) })
		if ferr != nil {
			return 0, 0, fmt.Errorf("read %s: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				records++
				keys[string(r.Key)] = struct{}{}
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return len(keys), records, nil
}

// docsProfile, with DECANT_BENCH_PROFILE_DIR set, records a CPU profile
// and an execution trace (which shows where goroutines block: the
// off-CPU side) of the decant process serving ops port addr, for the
// next seconds seconds, into <dir>/<name>.cpu.pprof and <name>.trace,
// and a heap profile halfway through, into <name>.heap.pprof
// (docs/performance.md, "Where the time goes"); with
// DECANT_BENCH_PROFILE_TRACE=0 the CPU profile only, since the trace
// costs CPU of its own. It returns at once; wait for the returned
// channel before the process stops.
func docsProfile(b *testing.B, addr, name string, seconds int) <-chan struct{} {
	done := make(chan struct{})
	dir := os.Getenv("DECANT_BENCH_PROFILE_DIR")
	if dir == "" {
		close(done)
		return done
	}
	var wg sync.WaitGroup
	get := func(path, file string) {
		defer wg.Done()
		for range 100 { // the process may not listen yet
			res, err := http.Get("http://" + addr + path)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			defer res.Body.Close()
			f, err := os.Create(filepath.Join(dir, file))
			if err != nil {
				b.Log(err)
				return
			}
			defer f.Close()
			if _, err := io.Copy(f, res.Body); err != nil {
				b.Logf("profile %s: %v", path, err)
			}
			return
		}
		b.Logf("profile %s: decant's ops port %s did not answer", path, addr)
	}
	wg.Add(3)
	go get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), name+".cpu.pprof")
	// The heap at the start too: go tool pprof -diff_base NAME.heap-start.pprof
	// NAME.heap.pprof shows what the profiled work allocated.
	go get("/debug/pprof/heap", name+".heap-start.pprof")
	go func() { // the heap halfway through, after a collection
		time.Sleep(time.Duration(seconds) * time.Second / 2)
		get("/debug/pprof/heap?gc=1", name+".heap.pprof")
	}()
	if os.Getenv("DECANT_BENCH_PROFILE_TRACE") != "0" {
		wg.Add(1)
		go get(fmt.Sprintf("/debug/pprof/trace?seconds=%d", seconds), name+".trace")
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

// docsBulkRequests reads how many bulk requests decant's Elasticsearch
// sink sent, and how many writes' parts they carried, from the /metrics
// of the process serving addr (0 when unreadable).
func docsBulkRequests(addr string) (requests, parts float64) {
	requests, _ = resMetric(addr, `decant_indexer_bulk_requests_total{sink="elasticsearch"}`)
	parts, _ = resMetric(addr, `decant_indexer_bulk_parts_total{sink="elasticsearch"}`)
	return requests, parts
}

// docsKafkaRequests is decant's requests to Kafka by type, most first,
// from decant_kafka_requests_total and the bytes series beside it:
// "total:N,Fetch:N/1.2MB/450.3MB,…" (requests / bytes sent / received).
func docsKafkaRequests(addr string) string {
	return docsKafkaRequestsSince(readKafkaRequests(addr), map[string]kafkaRequestKind{})
}

// kafkaRequestKind is one request type's counters in decant's /metrics.
type kafkaRequestKind struct{ n, written, received float64 }

// readKafkaRequests reads decant_kafka_requests_total and the bytes series
// beside it from the /metrics of the process serving addr, by request
// type (nil when unreadable).
func readKafkaRequests(addr string) map[string]kafkaRequestKind {
	_, body, err := testenv.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	byName := map[string]kafkaRequestKind{}
	for line := range strings.Lines(body) {
		series, rest, ok := strings.Cut(line, `{request="`)
		if !ok || !strings.HasPrefix(series, "decant_kafka_re") {
			continue
		}
		name, v, ok := strings.Cut(rest, `"} `)
		var f float64
		if _, err := fmt.Sscan(v, &f); !ok || err != nil {
			continue
		}
		k := byName[name]
		switch series {
		case "decant_kafka_requests_total":
			k.n = f
		case "decant_kafka_request_bytes_total":
			k.written = f
		case "decant_kafka_response_bytes_total":
			k.received = f
		}
		byName[name] = k
	}
	return byName
}

// docsKafkaRequestsSince formats the requests in now that were not yet in
// before (empty: all of them) as docsKafkaRequests does; "unknown" when
// either could not be read (nil).
func docsKafkaRequestsSince(now, before map[string]kafkaRequestKind) string {
	if now == nil || before == nil {
		return "unknown"
	}
	type kind struct {
		name string
		kafkaRequestKind
	}
	var kinds []kind
	var total float64
	for name, k := range now {
		b := before[name]
		k = kafkaRequestKind{k.n - b.n, k.written - b.written, k.received - b.received}
		if k.n > 0 {
			kinds = append(kinds, kind{name, k})
			total += k.n
		}
	}
	slices.SortFunc(kinds, func(a, b kind) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.name, b.name)) })
	out := fmt.Sprintf("total:%.0f", total)
	for _, k := range kinds {
		out += fmt.Sprintf(",%s:%.0f/%.1fMB/%.1fMB", k.name, k.n, k.written/1e6, k.received/1e6)
	}
	return out
}

// docsRefresh refreshes index: a direct load's documents are searchable
// only then, as decant's are when /v1/wait returns or a count sees them
// (both refresh), so every direct load of the ceilings is timed up to its
// refresh's answer.
func docsRefresh(b *testing.B, es *testenv.ESEnv, index string) {
	res, err := esapi.IndicesRefreshRequest{Index: []string{index}}.Do(testenv.Ctx(b), es.Client)
	if err != nil {
		b.Error(err)
		return
	}
	defer res.Body.Close()
	if res.IsError() {
		b.Errorf("refresh %s: %s", index, res.String())
	}
}
