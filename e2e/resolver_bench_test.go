package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/wire"
)

// resBenchSchema: customers with an address (many-to-one) and two orders
// each (one-to-many).
const resBenchSchema = `
CREATE TABLE addresses (id int PRIMARY KEY, city text NOT NULL, zip text);
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text, address_id int REFERENCES addresses(id));
CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL REFERENCES customers(id), status text, total numeric(12,2), placed_at timestamptz NOT NULL);
CREATE INDEX ON orders (customer_id);
`

const resBenchMapping = `version: 1
aggregates:
  customer:
    table: customers
    elasticsearch: {index: IDX_customer}
    relations:
      address: {table: addresses, references: address_id, columns: [city, zip]}
      orders: {table: orders, foreign_key: customer_id, columns: [id, status, total, placed_at], order_by: placed_at desc}
`

// BenchmarkBackfill is issue 5's acceptance 7: it backfills N customer
// aggregates (a root with two nested relations) through the refs topic,
// the build stage and both sinks, as `decant build` writes them (the
// aggregate topic and Elasticsearch) — from the first ref enqueued
// to the build group's commit of the last — and then bulk-loads the same
// documents straight into a fresh index with the same mappings, once per
// cell of the documents benchmarks' grid (requests of 1/5/10 MB × 2/4/8 in
// flight), and takes the fastest as the ceiling (building the documents
// is not timed). The servers are warmed up first, as in the documents
// benchmarks (docsBench.warmUp), and then by untimed backfills until the
// JVMs' compilers settle (resUntimedBackfills). It prints one
// line starting with "BENCH backfill" with both rates and their ratio
// (target ≥ 0.7).
//
// DECANT_BENCH_AGGREGATES sets N (default 100000; the figure is
// 1000000). DECANT_BENCH_KAFKA_SINK=0 leaves the aggregate topic out
// (Elasticsearch only, the figure before issue 14).
//
//	DECANT_BENCH_AGGREGATES=1000000 go test ./e2e -run '^$' -bench '^BenchmarkBackfill$' -benchtime 1x -timeout 120m
func BenchmarkBackfill(b *testing.B) {
	n := benchEnvInt("DECANT_BENCH_AGGREGATES", 100000)
	withKafka := os.Getenv("DECANT_BENCH_KAFKA_SINK") != "0"
	pg, k, es := testenv.Postgres(b), testenv.Kafka(b), testenv.Elasticsearch(b)
	ctx := testenv.Ctx(b)
	model, pool, log := benchCustomers(ctx, b, pg, n, es.Prefix)
	agg := model.Aggregate("customer")
	kopts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	// The defaults of `decant build`: 6 partitions, batches of 500 ids,
	// 4 workers, bulk requests of 1000 actions.
	cfg := resolver.Config{Kafka: kopts, TopicPrefix: k.Prefix, Logger: log,
		Workers: benchEnvInt("DECANT_BENCH_BUILD_WORKERS", 0), BatchSize: benchEnvInt("DECANT_BENCH_BUILD_BATCH", 0)}
	spec := indexer.SpecFor(agg, true)
	if _, err := indexer.EnsureIndex(ctx, es.Client, spec); err != nil {
		b.Fatal(err)
	}
	ess, err := indexer.NewESSink(indexer.ESSinkConfig{Client: es.Client, Aliases: map[string]string{agg.Name: agg.Index},
		Kafka: kopts, TopicPrefix: k.Prefix, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer ess.Close()
	sink := resolver.Sinks{ess}
	if withKafka {
		ks, err := indexer.NewKafkaSink(indexer.KafkaSinkConfig{Kafka: kopts, TopicPrefix: k.Prefix, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		defer ks.Close()
		sink = append(sink, ks)
	}
	builder, err := resolver.NewBuilder(cfg, model, pool, sink)
	if err != nil {
		b.Fatal(err)
	}
	defer resRunBuilder(ctx, b, builder)()
	// The build stage is running before the clock starts, as it is when
	// `decant backfill` is called: wait until its group is stable.
	resWaitGroupStable(b, k, k.Prefix+".build")

	docs, err := resBenchDocs(ctx, pool, agg, n)
	if err != nil {
		b.Fatal(err)
	}
	grid := &docsBench{n: n, pg: pg, k: k, es: es, agg: agg, warmDocs: docs[:min(len(docs), docsWarmDocs)]}
	// The servers' JVMs warm up before the clock starts, as in the
	// documents benchmarks: the grid always ran after the backfill and
	// found them warm, while the backfill of a first run on new servers
	// paid their compilers (0.49 against 0.84 one run later on the same
	// code, docs/performance.md, "Thirteenth pass").
	grid.warmUp(b, true)
	// Each backfill, untimed or timed, writes into a new empty index, so
	// that each writes new documents as the ceiling's direct load does.
	newIndex := func() {
		grid.deleteIndex(b, spec.IndexName())
		grid.freshIndex(b, agg.Index, false)
	}
	resUntimedBackfills(ctx, b, cfg, pool, model, es, agg.Name, newIndex)
	var pipeline, bulk time.Duration
	var cell docsBulk
	var servers string            // each server's CPU over the median backfill
	var esWork string             // what Elasticsearch did over it
	var jitRun, jitCeiling string // the JVMs' JIT compilers' CPU over it and over the ceiling's cell
	var cpuSum float64            // every server's and this process's CPU over the backfills
	rounds := 0
	var times []string // each timed backfill's seconds, in order
	for b.Loop() {
		rounds++
		// The median of resTimedBackfills backfills, each into a new index:
		// one backfill's time moves by a quarter from one to the next on the
		// same servers, as Elasticsearch merges segments in some and not in
		// others (docs/performance.md, "Twenty-eighth pass").
		var runs []resBackfillRun
		for range benchEnvInt("DECANT_BENCH_BACKFILL_ROUNDS", resTimedBackfills) {
			newIndex()
			resWaitESQuiet(b, es)
			var r resBackfillRun
			start, servers0, own0, es0, jit0 := time.Now(), readServerCPU(), freshCPU(b, os.Getpid()), readESStats(es), readJITCPU()
			stopProfile := resProfile(b, fmt.Sprintf("backfill-%d", len(runs)+1))
			bf := resBackfill(ctx, b, cfg, pool, model, agg.Name, 0)
			r.took = time.Since(start)
			stopProfile()
			r.es = readESStats(es).since(es0)
			r.jit, _ = readJITCPU().since(jit0)
			own := freshCPU(b, os.Getpid()) - own0
			r.servers, r.cpuSum = readServerCPU().since(servers0)
			r.servers = fmt.Sprintf("%s,decant:%.1f", r.servers, own)
			r.cpuSum += own
			if bf.Count != int64(n) {
				b.Fatalf("backfill enqueued %d ids, want %d", bf.Count, n)
			}
			b.Logf("timed backfill %d: %.2fs, CPU-seconds %s, %s", len(runs)+1, r.took.Seconds(), r.servers, r.es)
			times = append(times, fmt.Sprintf("%.2f", r.took.Seconds()))
			runs = append(runs, r)
		}
		slices.SortFunc(runs, func(x, y resBackfillRun) int { return cmp.Compare(x.took, y.took) })
		med := runs[len(runs)/2]
		pipeline += med.took
		servers, esWork, jitRun = med.servers, med.es, med.jit
		cpuSum += med.cpuSum
		cell, _ = grid.bulkGrid(b, docs, false)
		bulk += cell.took
		jitCeiling = cell.jit
	}
	if err := ess.Refresh(ctx, agg.Name); err != nil {
		b.Fatal(err)
	}
	total := float64(n * rounds)
	ours, theirs := total/pipeline.Seconds(), total/bulk.Seconds()
	b.ReportMetric(ours, "docs/s")
	b.ReportMetric(theirs, "direct-docs/s")
	b.ReportMetric(ours/theirs, "ratio")
	sinks := "elasticsearch"
	if withKafka {
		sinks += "+kafka"
	}
	// As in the documents benchmarks: the share of the cores the
	// backfill kept busy, and the ratio it would reach doing the same work
	// with every core busy all the time.
	fmt.Printf("BENCH backfill aggregates=%d sinks=%s decant=%.0f docs/s (%.2fs, the median of %s s) direct_bulk=%.0f docs/s (%.2fs, best of the grid, last %s) ratio=%.2f cpu_backfill=%s cpu_backfill_busy=%.2f ratio_at_full_cpu=%.2f cpu_ceiling=%s es_work=%s es_work_ceiling=%s jit_backfill=%s jit_ceiling=%s\n",
		n, sinks, ours, pipeline.Seconds()/float64(rounds), strings.Join(times, "/"), theirs, bulk.Seconds()/float64(rounds), cell, ours/theirs,
		servers, cpuBusy(cpuSum, pipeline), atFullCPU(bulk, cpuSum), cell.cpu, esWork, cell.es, jitRun, jitCeiling)
}

// resUntimedBackfills backfills every aggregate before the clock starts,
// once or more, until the JVMs' JIT compilers spend under docsJITSettled
// CPU-seconds in one backfill (at most resUntimedBackfillsMax), calling
// newIndex before each: rewriting the documents of an earlier backfill
// costs Elasticsearch more with each round, and the ceiling's direct load
// writes new documents. The documents benchmarks' warm-up alone left
// Elasticsearch compiling during the timed backfill of a first run on new
// servers, while the grid after it found its JVM warm (docs/performance.md,
// "Twenty-seventh pass").
func resUntimedBackfills(ctx context.Context, b *testing.B, cfg resolver.Config, pool *pgxpool.Pool, model *mappings.Model, es *testenv.ESEnv, aggregate string, newIndex func()) {
	b.Helper()
	for i := range resUntimedBackfillsMax {
		newIndex()
		resWaitESQuiet(b, es)
		start, jit0 := time.Now(), readJITCPU()
		resBackfill(ctx, b, cfg, pool, model, aggregate, 0)
		jit, sum := readJITCPU().since(jit0)
		b.Logf("untimed backfill %d (JVMs' warm-up): %.2fs, JIT compilers %.1f CPU-seconds (%s)", i+1, time.Since(start).Seconds(), sum, jit)
		if sum < docsJITSettled {
			break
		}
	}
}

// resUntimedBackfillsMax is how many untimed backfills resUntimedBackfills
// runs at most.
const resUntimedBackfillsMax = 3

// resBenchDocs builds the documents of ids 1..n with the aggregate's
// Build statement, 5000 ids per statement (not timed: the ceiling is the
// bulk load of them).
func resBenchDocs(ctx context.Context, pool mappings.Querier, agg *mappings.Aggregate, n int) ([]wire.Document, error) {
	docs := make([]wire.Document, 0, n)
	for p := 1; p <= n; p += 5000 {
		ids := make([][]json.RawMessage, 0, 5000)
		for id := p; id <= min(n, p+4999); id++ {
			ids = append(ids, []json.RawMessage{json.RawMessage(strconv.Itoa(id))})
		}
		args, err := agg.Build.Args(ids)
		if err != nil {
			return nil, err
		}
		rows, err := pool.Query(ctx, agg.Build.SQL, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id, doc []byte
			if err := rows.Scan(&id, &doc); err != nil {
				rows.Close()
				return nil, err
			}
			docs = append(docs, wire.Document{Aggregate: agg.Name, ID: json.RawMessage(`{"id":` + string(id) + `}`), Version: 1, Doc: wire.AppendCompact(nil, doc)})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	if len(docs) != n {
		return nil, fmt.Errorf("built %d documents of ids 1..%d", len(docs), n)
	}
	return docs, nil
}

// resWaitESQuiet flushes Elasticsearch, waits until no merge runs,
// writes the page cache's dirty pages to disk (sync(2)) and holds the
// memory the runs before freed in the page cache again
// (testenv.HoldFreeMemory), so that neither timed load pays for the
// background work or the freed memory the one before it left (merging a
// million freshly indexed documents takes minutes; a raw snapshot leaves
// a gigabyte of Kafka's log to write back, work the kernel does on the
// same cores and no server's CPU figure shows; dropped topics and indexes
// free gigabytes that cost several times the CPU to write into again).
func resWaitESQuiet(tb testing.TB, es *testenv.ESEnv) {
	tb.Helper()
	ctx := testenv.Ctx(tb)
	res, err := esapi.IndicesFlushRequest{}.Do(ctx, es.Search)
	if err != nil {
		tb.Fatal(err)
	}
	res.Body.Close()
	defer testenv.HoldFreeMemory(tb) // last: after sync, and the merges' freed files
	defer syscall.Sync()
	testenv.WaitFor(tb, "Elasticsearch merges to finish", 10*time.Minute, func() (bool, error) {
		res, err := esapi.IndicesStatsRequest{Metric: []string{"merge"}, FilterPath: []string{"_all.total.merges.current"}}.Do(ctx, es.Search)
		if err != nil {
			return false, err
		}
		defer res.Body.Close()
		var st struct {
			All struct {
				Total struct {
					Merges struct {
						Current int `json:"current"`
					} `json:"merges"`
				} `json:"total"`
			} `json:"_all"`
		}
		if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
			return false, err
		}
		return st.All.Total.Merges.Current == 0, fmt.Errorf("%d merges running", st.All.Total.Merges.Current)
	})
}

// resWaitGroupStable waits until group is stable with at least one member.
func resWaitGroupStable(tb testing.TB, k *testenv.KafkaEnv, group string) {
	tb.Helper()
	ctx := testenv.Ctx(tb)
	adm := kadm.NewClient(k.Client)
	testenv.WaitFor(tb, "consumer group "+group+" to be stable", 2*time.Minute, func() (bool, error) {
		gs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return false, err
		}
		g, ok := gs[group]
		if !ok || g.Err != nil {
			return false, fmt.Errorf("group %s not described (%v)", group, g.Err)
		}
		return g.State == "Stable" && len(g.Members) > 0, fmt.Errorf("state %s, %d members", g.State, len(g.Members))
	})
}

// resRunBuilder runs the build stage until the returned stop is called,
// which reports the error Run returned.
func resRunBuilder(ctx context.Context, b *testing.B, builder *resolver.Builder) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- builder.Run(ctx) }()
	return func() {
		cancel()
		if err := <-ran; err != nil {
			b.Error(err)
		}
	}
}

// BenchmarkFencingCost measures what fencing the build stage's writers
// (resolver.fence: the aggregate topic written in one Kafka transaction
// per refs partition and write) costs: two build stages, one fenced and
// one not, each on its own topic prefix, build the same N aggregates
// (backfills, the aggregate topic as the only sink) in alternating
// rounds. ratio = fenced docs/s ÷ unfenced docs/s, the best round of
// each. It prints one line starting with "BENCH fencing".
//
//	DECANT_BENCH_FENCE_AGGREGATES=100000 go test ./e2e -run '^$' -bench '^BenchmarkFencingCost$' -benchtime 4x -timeout 60m
func BenchmarkFencingCost(b *testing.B) {
	n := benchEnvInt("DECANT_BENCH_FENCE_AGGREGATES", 50000)
	pg, k, es := testenv.Postgres(b), testenv.Kafka(b), testenv.Elasticsearch(b)
	ctx := testenv.Ctx(b)
	model, pool, log := benchCustomers(ctx, b, pg, n, es.Prefix)
	kopts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	type side struct {
		name  string
		cfg   resolver.Config
		times []time.Duration
	}
	sides := []*side{
		{name: "fenced", cfg: resolver.Config{Kafka: kopts, TopicPrefix: k.Prefix + ".f", Logger: log}},
		{name: "unfenced", cfg: resolver.Config{Kafka: kopts, TopicPrefix: k.Prefix + ".u", Logger: log, Unfenced: true}},
	}
	for _, s := range sides {
		ks, err := indexer.NewKafkaSink(indexer.KafkaSinkConfig{Kafka: kopts, TopicPrefix: s.cfg.TopicPrefix, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		defer ks.Close()
		builder, err := resolver.NewBuilder(s.cfg, model, pool, resolver.Sinks{ks})
		if err != nil {
			b.Fatal(err)
		}
		defer resRunBuilder(ctx, b, builder)()
		resWaitGroupStable(b, k, s.cfg.TopicPrefix+".build")
	}
	round := 0
	for b.Loop() {
		for i := range sides {
			s := sides[(i+round)%2] // alternate which goes first
			start := time.Now()
			if bf := resBackfill(ctx, b, s.cfg, pool, model, "customer", 0); bf.Count != int64(n) {
				b.Fatalf("backfill enqueued %d ids, want %d", bf.Count, n)
			}
			s.times = append(s.times, time.Since(start))
		}
		round++
	}
	fenced, unfenced := slices.Min(sides[0].times), slices.Min(sides[1].times)
	ours, theirs := float64(n)/fenced.Seconds(), float64(n)/unfenced.Seconds()
	b.ReportMetric(ours/theirs, "ratio")
	fmt.Printf("BENCH fencing aggregates=%d fenced=%.0f docs/s (%.2fs) unfenced=%.0f docs/s (%.2fs) ratio=%.2f rounds=%d fenced_seconds=%s unfenced_seconds=%s\n",
		n, ours, fenced.Seconds(), theirs, unfenced.Seconds(), ours/theirs, round, docsSeconds(sides[0].times), docsSeconds(sides[1].times))
}

// resTimedBackfills is how many timed backfills BenchmarkBackfill runs
// before each ceiling; it reports their median
// (DECANT_BENCH_BACKFILL_ROUNDS).
const resTimedBackfills = 3

// resBackfillRun is one timed backfill: its time, every server's CPU and
// this process's over it (servers; their sum), what Elasticsearch did and
// what the JVMs' compilers spent.
type resBackfillRun struct {
	took             time.Duration
	servers, es, jit string
	cpuSum           float64
}

// resProfile, with DECANT_BENCH_PROFILE_DIR set, records a CPU profile of
// this process (where BenchmarkBackfill runs the build stage and its
// sinks) into <dir>/<name>.cpu.pprof until the returned func is called.
func resProfile(b *testing.B, name string) (stop func()) {
	dir := os.Getenv("DECANT_BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}
