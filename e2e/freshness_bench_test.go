package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/wire"
)

// freshMapping is the backfill benchmark's customer aggregate with a seq
// column on customers and on orders: every change writes the next seq, so
// a document shows which changes it already contains.
const freshMapping = `version: 1
aggregates:
  customer:
    table: customers
    elasticsearch:
      index: ALIAS
      settings: {number_of_shards: 1, number_of_replicas: 0}
    relations:
      address: {table: addresses, references: address_id, columns: [city, zip]}
      orders: {table: orders, foreign_key: customer_id, columns: [id, status, total, placed_at, seq], order_by: placed_at desc}
`

// BenchmarkFreshness measures end-to-end freshness — from a change's
// commit to the moment a search in Elasticsearch returns its document with
// the change in it — of `decant run` running as a child process, plus its
// peak RSS and CPU time per 1,000 changes (issue 8).
//
// A change is one transaction updating one row: even changes set
// customers.seq of a customer, odd ones orders.seq of one of its orders
// (which the map stage routes to the customer); seq grows by one per
// change. A build reads the whole document in a snapshot taken after the
// change committed, so a searchable document whose largest seq is s
// contains every earlier change to it.
//
//  1. Maximum rate: K changes to K distinct documents are committed as
//     fast as 8 connections can, while decant works; the rate is K over
//     the time from the first commit to /v1/wait returning for the last
//     one (built, written and refreshed). On a small machine the writes
//     and the pipeline share the cores, as they do in the next phase.
//  2. Freshness: the same connections commit changes at half that rate
//     (override with DECANT_BENCH_FRESHNESS_RATE), first for
//     DECANT_BENCH_FRESHNESS_WARMUP_SECONDS unmeasured (default 30: the
//     servers' first minutes are not their steady state), then for
//     DECANT_BENCH_FRESHNESS_SECONDS (default 60), each change to the next
//     document in turn. About 100 changes a second are sampled; a poller searches
//     their documents by id, pausing 25 ms between searches, and a
//     change's latency is the time from its commit returning to the
//     sending of the search that first shows it: a reader who searched
//     then found it, and the search before, sent at most one search and
//     one pause earlier, did not (p50 and p99). The same latencies timed to that
//     search's answer instead, as a reader waiting for it sees them, are
//     printed as answered_p50 and answered_p99. Elasticsearch's
//     refresh interval (1 s by default) is part of the figure, as it is
//     for any reader. The medians of the first and last quarter of the
//     window are printed too: when the last is far higher, the pipeline
//     did not keep up with the rate (sustained=no) and the percentiles
//     measure a growing backlog. The poller's searches are timed too
//     (search_p50, search_p99), and the index's refreshes over the phase
//     counted (es_refreshes, es_refresh_mean): a change is searchable
//     only after the refresh that follows its write. Every 100 ms of the
//     window the benchmark also writes a probe, an empty document, straight
//     into the same index and times it from Elasticsearch's answer to the
//     search that first finds it, with the same poller (probe_p50,
//     probe_p99): the index's refresh cycle under the same load, which any
//     writer's changes wait for; the probes are deleted afterwards.
//  3. Low rate: DECANT_BENCH_FRESHNESS_LOW_RATE changes a second (100 by
//     default) for DECANT_BENCH_FRESHNESS_LOW_SECONDS (30 by default), until
//     /v1/wait returns: decant's CPU per 1,000 changes (cpu_low_rate) and
//     its ratio to phase 1's (cpu_low_over_max), where the fixed costs of
//     each batch and the idle work are no longer shared by many changes.
//
// The same sampled changes are also timed from their commit to the first
// record of their document in the aggregate topic that holds them (a
// consumer reading the topic from its end offsets at the start of phase
// 2): agg_topic_p50 and agg_topic_p99, the latency a downstream service
// consuming the aggregate topic sees (the window starts once that consumer
// has had its first fetch answered, as a service already reading the
// topic has); agg_produced_p50 and
// agg_produced_p99 time the same changes to their record's timestamp,
// when the build stage produced it, so the rest is its transaction's
// commit and the consumer's fetch. agg_hops_* split that latency into the
// pipeline's hops (stream, map, build, visible: freshHops), from the
// timestamps of the raw and refs records each change left, read after the
// window; agg_hops_tail_mean is where the slowest 1% spent their time.
// servers_cpu is each server's CPU over phase 2, and the share of the
// cores it and decant's kept busy: at half the maximum rate a change costs
// about twice its CPU at the maximum, so the cores may be full.
//
// CPU time is read from /proc/<pid>/stat over each phase, peak RSS is
// VmHWM at the end. It prints one line starting with "BENCH freshness".
// DECANT_BENCH_FRESHNESS_AGGREGATES sets the customers (default 50000),
// DECANT_BENCH_FRESHNESS_BURST the changes of phase 1 (default 30000, at
// most the customers). DECANT_BENCH_FRESHNESS_HOT=K sends phase 2's
// changes to the first K documents only (hot documents: each changes
// every K/rate seconds, while its earlier change may still be written;
// the hops' split then attributes a change to the first refs record of
// its document after its raw record, which may be an earlier change's).
// DECANT_BENCH_FRESHNESS_LOG keeps decant's log in that file.
// DECANT_BENCH_PROFILE_DIR saves decant's CPU profile of phase 2
// (freshness.cpu.pprof) and of phase 3 (freshness-low.cpu.pprof), with
// heap profiles, in that directory.
//
//	go test ./e2e -run '^$' -bench '^BenchmarkFreshness$' -benchtime 1x -timeout 30m
func BenchmarkFreshness(b *testing.B) {
	n := benchEnvInt("DECANT_BENCH_FRESHNESS_AGGREGATES", 50_000)
	burst := min(n, benchEnvInt("DECANT_BENCH_FRESHNESS_BURST", 30_000))
	seconds := benchEnvInt("DECANT_BENCH_FRESHNESS_SECONDS", 60)
	warmup := benchEnvInt("DECANT_BENCH_FRESHNESS_WARMUP_SECONDS", 30)
	fixedRate := benchEnvInt("DECANT_BENCH_FRESHNESS_RATE", 0)
	lowRate := benchEnvInt("DECANT_BENCH_FRESHNESS_LOW_RATE", 100)
	lowSeconds := benchEnvInt("DECANT_BENCH_FRESHNESS_LOW_SECONDS", 30)
	idleSeconds := benchEnvInt("DECANT_BENCH_FRESHNESS_IDLE_SECONDS", 10)
	hot := min(n, benchEnvInt("DECANT_BENCH_FRESHNESS_HOT", n))
	pg, k, es := testenv.Postgres(b), testenv.Kafka(b), testenv.Elasticsearch(b)
	ctx := testenv.Ctx(b)
	benchSeedCustomers(b, pg, n)
	pg.Exec(b, `ALTER TABLE customers ADD COLUMN seq bigint NOT NULL DEFAULT 0;
ALTER TABLE orders ADD COLUMN seq bigint NOT NULL DEFAULT 0;
ALTER TABLE customers REPLICA IDENTITY FULL;
ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE addresses REPLICA IDENTITY FULL;`)

	alias := es.Prefix + "-customer"
	dir := b.TempDir()
	testenv.WriteFile(b, filepath.Join(dir, "mappings", "bench.yaml"), strings.ReplaceAll(freshMapping, "ALIAS", alias))
	addr := testenv.FreePort(b)
	config := testenv.WriteFile(b, filepath.Join(dir, "decant.yaml"), fmt.Sprintf(`postgres:
  dsn: %s
  slot: decant_%s
kafka:
  brokers: [%s]
  topic_prefix: %s
elasticsearch:
  urls: [%s]
mappings: [mappings/*.yaml]
http:
  listen: %s
streamer:
  snapshot_mode: never
`, pg.DSN, testenv.Suffix(), strings.Join(k.Brokers, ","), k.Prefix, es.URL, addr))
	logPath := filepath.Join(dir, "decant.log")
	if v := os.Getenv("DECANT_BENCH_FRESHNESS_LOG"); v != "" {
		logPath = v
	}
	run := testenv.Start(b, "decant run", logPath, testenv.DecantCmd(b, nil, "run", "--config", config))
	defer func() {
		if code := run.Term(60 * time.Second); code != 0 {
			b.Errorf("decant run exited %d after SIGTERM; log:\n%s", code, run.Tail(40))
		}
	}()
	cl := opsapi.NewClient("http://" + addr)
	// The first start backfills every document: wait for all of them and
	// for the slot to be past the seed.
	testenv.WaitFor(b, "decant run's /readyz", 2*time.Minute, func() (bool, error) {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return run.Exited(), err
		}
		res.Body.Close()
		return res.StatusCode == 200, fmt.Errorf("status %s", res.Status)
	})
	if run.Exited() {
		b.Fatalf("decant run exited; log:\n%s", run.Tail(40))
	}
	started := time.Now()
	testenv.WaitFor(b, fmt.Sprintf("the initial backfill of %d documents", n), 10*time.Minute, func() (bool, error) {
		c, err := freshCount(ctx, es, alias, `{"match_all":{}}`)
		if run.Exited() {
			b.Fatalf("decant run exited; log:\n%s", run.Tail(40))
		}
		return c == n, fmt.Errorf("%d documents, %v", c, err)
	})
	b.Logf("initial backfill of %d documents: %s", n, time.Since(started).Round(time.Millisecond))
	if err := cl.Wait(ctx, freshLSN(b, pg), 5*time.Minute); err != nil {
		b.Fatalf("/v1/wait after the backfill: %v", err)
	}

	pool := freshPool(ctx, b, pg.DSN)
	defer pool.Close()
	var (
		seq                           int64 // last seq written
		hopsReport, steadyServers     string
		steadyBusy                    float64
		rateIs                        string
		maxRate, rate                 float64
		burstCPU, steadyCPU           float64
		burstTook, commitsTook        time.Duration
		changes                       int64
		achieved                      float64
		samples, aggSamples           []freshSample
		searches, probes              []time.Duration
		cpuBurstPer1k, cpuSteadyPer1k float64
		refresh                       freshRefreshes
		cpuLowPer1k                   float64
		idleCores                     float64
		lowChanges                    int64
	)
	for b.Loop() {
		// 1. Maximum rate.
		cpu0 := freshCPU(b, run.Pid())
		t0 := time.Now()
		if err := freshDrive(ctx, pool, n, seq, burst, 0, 0, nil); err != nil {
			b.Fatalf("maximum rate: %v", err)
		}
		commitsTook = time.Since(t0)
		if err := cl.Wait(ctx, freshLSN(b, pg), 10*time.Minute); err != nil {
			b.Fatalf("/v1/wait after %d changes: %v", burst, err)
		}
		burstTook = time.Since(t0)
		burstCPU = freshCPU(b, run.Pid()) - cpu0
		q := fmt.Sprintf(`{"bool":{"should":[{"range":{"seq":{"gt":%[1]d}}},{"range":{"orders.seq":{"gt":%[1]d}}}]}}`, seq)
		if c, err := freshCount(ctx, es, alias, q); err != nil || c != burst {
			b.Fatalf("after /v1/wait, %d documents hold a change of the burst (%v), want %d", c, err, burst)
		}
		seq += int64(burst)
		maxRate = float64(burst) / burstTook.Seconds()

		// 2. Freshness at half the maximum rate.
		rate, rateIs = maxRate/2, "half_max"
		if fixedRate > 0 {
			rate, rateIs = float64(fixedRate), "fixed"
		}
		// Unmeasured, at the same rate: the window measures the steady
		// state, not the servers' first minutes (an Elasticsearch started
		// minutes before refreshed 3 times slower for about a minute).
		if warmup > 0 {
			var mu sync.Mutex // committed is called from every connection
			warmed := seq
			if err := freshDrive(ctx, pool, hot, seq, math.MaxInt, rate, time.Duration(warmup)*time.Second, func(s int64, _ int, _ time.Time) {
				mu.Lock()
				defer mu.Unlock()
				warmed = max(warmed, s)
			}); err != nil {
				b.Fatalf("warm-up: %v", err)
			}
			seq = warmed
		}
		cpu0 = freshCPU(b, run.Pid())
		servers0, steadyFrom := readServerCPU(), time.Now()
		profiled := docsProfile(b, addr, "freshness", benchEnvInt("DECANT_BENCH_PROFILE_SECONDS", 20))
		defer func() { <-profiled }()
		refresh0 := freshRefreshStats(ctx, b, es, alias)
		fr := freshSteady(ctx, b, pool, es, alias, k, wire.AggTopic(k.Prefix, "customer"), hot, seq, rate, time.Duration(seconds)*time.Second)
		steadyCPU = freshCPU(b, run.Pid()) - cpu0
		var serversSum float64
		steadyServers, serversSum = readServerCPU().since(servers0)
		steadyBusy = cpuBusy(serversSum+steadyCPU, time.Since(steadyFrom))
		raw, refs := fr.hops.read(ctx, b)
		hopsReport = fr.hops.report(fr.hops.split(fr.agg, raw, refs))
		refresh = freshRefreshStats(ctx, b, es, alias).since(refresh0)
		samples, aggSamples, searches, probes = fr.lat, fr.agg, fr.searches, fr.probes
		seq += fr.changes
		changes = fr.changes
		achieved = float64(fr.changes) / fr.took.Seconds()
		cpuBurstPer1k = burstCPU * 1000 / float64(burst)
		cpuSteadyPer1k = steadyCPU * 1000 / float64(fr.changes)

		// 3. CPU per change at a low rate (issue 14's acceptance 6
		// compares it with the maximum rate's): the changes and the
		// pipeline's idle work, until /v1/wait says all are written.
		<-profiled // one CPU profile at a time
		cpu0 = freshCPU(b, run.Pid())
		lowCount := lowRate * lowSeconds
		lowProfiled := docsProfile(b, addr, "freshness-low", min(lowSeconds, benchEnvInt("DECANT_BENCH_PROFILE_SECONDS", 20)))
		defer func() { <-lowProfiled }()
		if err := freshDrive(ctx, pool, n, seq, lowCount, float64(lowRate), time.Duration(lowSeconds)*time.Second, nil); err != nil {
			b.Fatalf("low rate: %v", err)
		}
		if err := cl.Wait(ctx, freshLSN(b, pg), 5*time.Minute); err != nil {
			b.Fatalf("/v1/wait after the low rate: %v", err)
		}
		lowChanges = int64(lowCount)
		seq += lowChanges
		cpuLowPer1k = (freshCPU(b, run.Pid()) - cpu0) * 1000 / float64(lowChanges)

		// 4. No changes: the CPU the pipeline spends idle (fetches,
		// heartbeats, status updates), the floor under phase 3's figure.
		cpu0 = freshCPU(b, run.Pid())
		idleFrom := time.Now()
		if !ctxtime.Sleep(ctx, time.Duration(idleSeconds)*time.Second) {
			b.Fatal(ctx.Err())
		}
		idleCores = (freshCPU(b, run.Pid()) - cpu0) / time.Since(idleFrom).Seconds()
	}
	rss, err := run.PeakRSS()
	if err != nil {
		b.Fatal(err)
	}
	window := time.Duration(seconds) * time.Second
	var lat, answered, first, last []time.Duration
	for _, sm := range samples {
		lat = append(lat, sm.latency)
		answered = append(answered, sm.answered)
		if sm.at < window/4 {
			first = append(first, sm.latency)
		} else if sm.at >= window*3/4 {
			last = append(last, sm.latency)
		}
	}
	p50, p99 := freshPercentile(lat, 0.50), freshPercentile(lat, 0.99)
	var aggLat, aggProduced []time.Duration
	var aggQuarters [4][]time.Duration
	for _, sm := range aggSamples {
		aggLat = append(aggLat, sm.latency)
		aggProduced = append(aggProduced, sm.produced)
		q := min(3, max(0, int(sm.at*4/max(window, 1))))
		aggQuarters[q] = append(aggQuarters[q], sm.latency)
	}
	aggP50, aggP99 := freshPercentile(aggLat, 0.50), freshPercentile(aggLat, 0.99)
	// Where in the window the aggregate topic's tail is: a start-up
	// transient shows in the first quarter only, a periodic stall in all.
	var byQuarter []string
	for _, q := range aggQuarters {
		byQuarter = append(byQuarter, strconv.FormatInt(freshPercentile(q, 0.99).Milliseconds(), 10))
	}
	// A rate the pipeline cannot sustain shows as latencies that grow
	// through the window: a backlog, not freshness.
	p50First, p50Last := freshPercentile(first, 0.5), freshPercentile(last, 0.5)
	sustained := "yes"
	if p50Last > 2*p50First+time.Second {
		sustained = "no"
		b.Logf("warning: the pipeline did not keep up with %.0f changes/s: median latency grew from %s (first quarter) to %s (last quarter)", rate, p50First, p50Last)
	}
	b.ReportMetric(maxRate, "max-changes/s")
	b.ReportMetric(float64(p50.Milliseconds()), "p50-ms")
	b.ReportMetric(float64(p99.Milliseconds()), "p99-ms")
	fmt.Printf("BENCH freshness aggregates=%d max_rate=%.0f changes/s (%d in %.2fs, commits %.2fs) rate=%.0f changes/s (target %.0f, %d changes in %ds) rate_is=%s hot_documents=%d samples=%d p50=%dms p99=%dms max=%dms answered_p50=%dms answered_p99=%dms agg_topic_p50=%dms agg_topic_p99=%dms agg_produced_p50=%dms agg_produced_p99=%dms agg_topic_p99_by_quarter=%sms p50_first_quarter=%dms p50_last_quarter=%dms sustained=%s search_p50=%dms search_p99=%dms es_refreshes=%d es_refresh_mean=%dms probes=%d probe_p50=%dms probe_p99=%dms cpu_max_rate=%.3fs/1k changes cpu=%.3fs/1k changes cpu_low_rate=%.3fs/1k changes (%d changes at %d/s) cpu_low_over_max=%.2f cpu_idle=%.1f%% of a core (%ds) peak_rss=%dMB servers_cpu=%s (%.0f%% busy with decant's) %s\n",
		n, maxRate, burst, burstTook.Seconds(), commitsTook.Seconds(), achieved, rate, changes, seconds, rateIs, hot, len(lat),
		p50.Milliseconds(), p99.Milliseconds(), freshPercentile(lat, 1).Milliseconds(),
		freshPercentile(answered, 0.5).Milliseconds(), freshPercentile(answered, 0.99).Milliseconds(), aggP50.Milliseconds(), aggP99.Milliseconds(),
		freshPercentile(aggProduced, 0.5).Milliseconds(), freshPercentile(aggProduced, 0.99).Milliseconds(), strings.Join(byQuarter, "/"), p50First.Milliseconds(), p50Last.Milliseconds(), sustained,
		freshPercentile(searches, 0.5).Milliseconds(), freshPercentile(searches, 0.99).Milliseconds(), refresh.count, refresh.mean().Milliseconds(),
		len(probes), freshPercentile(probes, 0.5).Milliseconds(), freshPercentile(probes, 0.99).Milliseconds(),
		cpuBurstPer1k, cpuSteadyPer1k, cpuLowPer1k, lowChanges, lowRate, cpuLowPer1k/cpuBurstPer1k, idleCores*100, idleSeconds, rss>>20, steadyServers, steadyBusy*100, hopsReport)
}

// freshPool is the pool of 8 connections the benchmarks commit changes from.
func freshPool(ctx context.Context, tb testing.TB, dsn string) *pgxpool.Pool {
	tb.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	pc.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		tb.Fatal(err)
	}
	return pool
}

// freshChange is one sampled change: its seq and when its commit returned.
type freshChange struct {
	seq       int64
	committed time.Time
}

// freshRead is the newest record of a document read from the aggregate
// topic: the highest seq it shows, when it was read and its timestamp.
type freshRead struct {
	top          int64
	at, produced time.Time
}

// freshSample is the latency of one sampled change committed at (since
// the start of the window).
type freshSample struct {
	at, latency time.Duration
	// answered is, for a search, the latency to the answer of the search
	// that showed the change (latency is to its sending).
	answered time.Duration
	// produced is, on the aggregate topic, the latency to the timestamp
	// of the record that showed the change, when the build stage produced
	// it (latency is to the record being read, once its transaction
	// committed).
	produced time.Duration
	// seq and doc are the change and its document; committed is when its
	// commit returned.
	seq       int64
	doc       int
	committed time.Time
}

// freshDrive commits count changes, seq+1 onwards, from 8 connections:
// as fast as they go when rate is 0, else at rate per second for at most
// d. Change s goes to document (s-1) mod n + 1, always through the same
// connection, so the changes to one document commit in seq order.
// committed, when set, is called after each commit.
func freshDrive(ctx context.Context, pool *pgxpool.Pool, n int, seq int64, count int, rate float64, d time.Duration, committed func(s int64, doc int, at time.Time)) error {
	const workers = 8
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	chans := make([]chan int64, workers)
	for w := range chans {
		chans[w] = make(chan int64, 256)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range chans[w] {
				doc := int((s-1)%int64(n)) + 1
				var err error
				if s%2 == 0 {
					_, err = pool.Exec(ctx, `UPDATE customers SET seq = $1 WHERE id = $2`, s, doc)
				} else {
					_, err = pool.Exec(ctx, `UPDATE orders SET seq = $1 WHERE id = $2`, s, 2*doc)
				}
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					continue
				}
				if committed != nil {
					committed(s, doc, time.Now())
				}
			}
		}()
	}
	start := time.Now()
	for i := range count {
		if rate > 0 {
			due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if due.Sub(start) >= d {
				break
			}
			if wait := time.Until(due); wait > 0 {
				time.Sleep(wait)
			}
		}
		s := seq + int64(i) + 1
		chans[((s-1)%int64(n))%workers] <- s
	}
	for _, c := range chans {
		close(c)
	}
	wg.Wait()
	return first
}

// freshSteady commits changes at rate per second for d, starting at seq+1,
// and measures the commit-to-searchable latency of about 100 sampled
// changes a second. It returns once every sampled change is searchable,
// with the samples, the changes committed and the time that took.
// freshRun is what freshSteady measured: the sampled changes' latencies
// to searchable (lat) and to the aggregate topic (agg), the changes
// committed and how long that took, and how long each of the poller's
// searches took (a latency is at most one search and one pause high).
type freshRun struct {
	lat, agg []freshSample
	changes  int64
	took     time.Duration
	searches []time.Duration
	// probes are the latencies, from Elasticsearch's acknowledgement to
	// the sending of the search that first found it, of documents the
	// benchmark itself wrote into the same index during the window
	// (freshProbeEvery): the part of commit → searchable that belongs to
	// Elasticsearch's refresh cycle, which no writer can go under.
	probes []time.Duration
	// hops splits the aggregate topic's latency into the pipeline's hops
	// (read them after the CPU of the window is taken).
	hops *freshHops
}

// freshProbeEvery is how often freshSteady writes a probe document.
const freshProbeEvery = 100 * time.Millisecond

// freshFetchReady is closed by the aggregate topic consumer's first fetch
// response: from then on its fetches wait at the broker for new records,
// and a record is seen when it is committed, not when the consumer has
// connected, looked its partitions up and sent its first fetch.
type freshFetchReady struct {
	once sync.Once
	c    chan struct{}
}

func (r *freshFetchReady) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 1 && err == nil { // Fetch
		r.once.Do(func() { close(r.c) })
	}
}

func freshSteady(ctx context.Context, b *testing.B, pool *pgxpool.Pool, es *testenv.ESEnv, alias string, k *testenv.KafkaEnv, aggTopic string, n int, seq int64, rate float64, d time.Duration) freshRun {
	every := max(1, int64(math.Round(rate/100)))
	var (
		mu         sync.Mutex
		pending    = map[int][]freshChange{} // document id → sampled changes not yet searchable
		aggPending = map[int][]freshChange{} // document id → sampled changes not yet in the aggregate topic
		aggRead    = map[int]freshRead{}     // document id → its newest record read from the aggregate topic
		lat, agg   []freshSample
		searches   []time.Duration
		start      time.Time
		first      error
		last       int64
		probes     = map[string]time.Time{} // probe id → acknowledged, not yet searchable
		probeLat   []time.Duration
		written    []string // every probe id
	)
	// seen moves the sampled changes of doc up to seq top from p to out,
	// each made a sample by sample from its commit time.
	seen := func(p map[int][]freshChange, out *[]freshSample, doc int, top int64, sample func(committed time.Time) freshSample) {
		cs := p[doc]
		i := 0
		for ; i < len(cs) && cs[i].seq <= top; i++ {
			sm := sample(cs[i].committed)
			sm.at = cs[i].committed.Sub(start)
			sm.seq, sm.doc, sm.committed = cs[i].seq, doc, cs[i].committed
			*out = append(*out, sm)
		}
		if i == len(cs) {
			delete(p, doc)
		} else {
			p[doc] = cs[i:]
		}
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for pollCtx.Err() == nil {
			mu.Lock()
			ids := make([]string, 0, len(pending))
			from := int64(math.MaxInt64)
			for doc, cs := range pending {
				if len(ids) == 1000 {
					break
				}
				ids = append(ids, strconv.Itoa(doc))
				from = min(from, cs[0].seq)
			}
			mu.Unlock()
			if len(ids) > 0 {
				asked := time.Now()
				tops, err := freshSearchSeqs(pollCtx, es, alias, ids, from)
				now := time.Now()
				mu.Lock()
				searches = append(searches, now.Sub(asked))
				if err != nil && pollCtx.Err() == nil {
					first = cmp.Or(first, err)
				}
				searched := func(c time.Time) freshSample {
					// A commit that returned after the search was sent
					// counts as found at once (it does not happen: the
					// pipeline takes longer than a commit's answer).
					return freshSample{latency: max(0, asked.Sub(c)), answered: now.Sub(c)}
				}
				for doc, top := range tops {
					seen(pending, &lat, doc, top, searched)
				}
				mu.Unlock()
			}
			mu.Lock()
			pids := make([]string, 0, len(probes))
			for id := range probes {
				pids = append(pids, id)
			}
			mu.Unlock()
			if len(pids) > 0 {
				asked := time.Now()
				found, err := freshSearchIDs(pollCtx, es, alias, pids)
				mu.Lock()
				if err != nil && pollCtx.Err() == nil {
					first = cmp.Or(first, err)
				}
				for _, id := range found {
					if acked, ok := probes[id]; ok {
						probeLat = append(probeLat, max(0, asked.Sub(acked)))
						delete(probes, id)
					}
				}
				mu.Unlock()
			}
			time.Sleep(25 * time.Millisecond)
		}
	}()

	hops := newFreshHops(ctx, b, k)
	// The aggregate topic is read from its end offsets now, so every record
	// of a change committed from here on is seen.
	ends, lerr := k.Admin.ListEndOffsets(ctx, aggTopic)
	if lerr != nil {
		b.Fatal(lerr)
	}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { from[o.Partition] = kgo.NewOffset().At(o.Offset) })
	// Read committed: a document is on the aggregate topic for its
	// consumers once its transaction committed.
	ready := &freshFetchReady{c: make(chan struct{})}
	cl, lerr := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{aggTopic: from}),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.WithHooks(ready))
	if lerr != nil {
		b.Fatal(lerr)
	}
	defer cl.Close()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for pollCtx.Err() == nil {
			fs := cl.PollFetches(pollCtx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				var key struct{ ID int }
				var env struct {
					Doc *struct {
						Seq    int64 `json:"seq"`
						Orders []struct {
							Seq int64 `json:"seq"`
						} `json:"orders"`
					} `json:"doc"`
				}
				if json.Unmarshal(r.Key, &key) != nil || r.Value == nil || json.Unmarshal(r.Value, &env) != nil || env.Doc == nil {
					return
				}
				top := env.Doc.Seq
				for _, o := range env.Doc.Orders {
					top = max(top, o.Seq)
				}
				seen(aggPending, &agg, key.ID, top, func(c time.Time) freshSample {
					return freshSample{latency: now.Sub(c), produced: r.Timestamp.Sub(c)}
				})
				if top > aggRead[key.ID].top {
					aggRead[key.ID] = freshRead{top: top, at: now, produced: r.Timestamp}
				}
			})
			mu.Unlock()
		}
	}()

	// The consumer is a downstream service already reading the topic:
	// the window starts once it is (a first run counted its start-up,
	// metadata and first fetch, in the first changes' latencies).
	select {
	case <-ready.c:
	case <-time.After(30 * time.Second):
		b.Fatalf("the consumer of %s got no fetch response in 30 s", aggTopic)
	}
	mu.Lock()
	start = time.Now()
	mu.Unlock()
	// Probes: a document written straight into the index every
	// freshProbeEvery, timed from Elasticsearch's answer to the search
	// that first finds it.
	probeCtx, stopProbes := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		t := time.NewTicker(freshProbeEvery)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-probeCtx.Done():
				return
			case <-t.C:
			}
			id := fmt.Sprintf("probe-%d", i)
			res, err := esapi.IndexRequest{Index: alias, DocumentID: id, Body: strings.NewReader(`{}`)}.Do(probeCtx, es.Search)
			acked := time.Now()
			if err == nil {
				if res.IsError() {
					err = fmt.Errorf("probe %s: %s", id, res.String())
				}
				res.Body.Close()
			}
			mu.Lock()
			if err != nil && probeCtx.Err() == nil {
				first = cmp.Or(first, err)
			} else if err == nil {
				probes[id] = acked
				written = append(written, id)
			}
			mu.Unlock()
		}
	}()
	err := freshDrive(ctx, pool, n, seq, math.MaxInt, rate, d, func(s int64, doc int, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		last = max(last, s)
		if s%every == 0 {
			pending[doc] = append(pending[doc], freshChange{s, at})
			if rd := aggRead[doc]; rd.top >= s {
				// Its document was read before this callback ran (the
				// pipeline outran the commit's answer to this goroutine):
				// a change waits in aggPending for a record still to come,
				// and none may come in the window.
				agg = append(agg, freshSample{at: at.Sub(start), latency: max(0, rd.at.Sub(at)), produced: max(0, rd.produced.Sub(at)), seq: s, doc: doc, committed: at})
			} else {
				aggPending[doc] = append(aggPending[doc], freshChange{s, at})
			}
		}
	})
	took := time.Since(start)
	stopProbes()
	<-probed
	if err != nil {
		b.Fatalf("freshness: %v", err)
	}
	testenv.WaitFor(b, "every sampled change to be searchable", 5*time.Minute, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil {
			b.Fatalf("freshness: %v", first)
		}
		var stuck []string // what a failure needs to tell a lost record from a late one
		for doc, cs := range aggPending {
			if len(stuck) == 3 {
				break
			}
			stuck = append(stuck, fmt.Sprintf("document %d: first change %d, newest record read shows %d", doc, cs[0].seq, aggRead[doc].top))
		}
		return len(pending) == 0 && len(aggPending) == 0 && len(probes) == 0, fmt.Errorf("%d documents with changes not yet searchable, %d not yet in %s %v, %d probes not yet searchable", len(pending), len(aggPending), aggTopic, stuck, len(probes))
	})
	stopPoll()
	<-polled
	<-consumed
	// The probes leave the index as they came: nothing else counts them,
	// but decant's documents are all the index should hold.
	body, _ := json.Marshal(map[string]any{"query": map[string]any{"ids": map[string]any{"values": written}}})
	if res, err := (esapi.DeleteByQueryRequest{Index: []string{alias}, Body: bytes.NewReader(body)}).Do(ctx, es.Search); err != nil {
		b.Fatalf("delete the probes: %v", err)
	} else {
		if res.IsError() {
			b.Fatalf("delete the probes: %s", res.String())
		}
		res.Body.Close()
	}
	return freshRun{lat: lat, agg: agg, changes: last - seq, took: took, searches: searches, probes: probeLat, hops: hops}
}

// freshSearchIDs returns those of ids that a search of alias finds.
func freshSearchIDs(ctx context.Context, es *testenv.ESEnv, alias string, ids []string) ([]string, error) {
	var hits []struct {
		ID string `json:"_id"`
	}
	if err := freshSearch(ctx, es, alias, map[string]any{"size": len(ids), "_source": false, "query": map[string]any{"ids": map[string]any{"values": ids}}}, &hits); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(hits))
	for _, h := range hits {
		out = append(out, h.ID)
	}
	return out, nil
}

// freshSearch searches alias with body and decodes the hits into hits, a
// pointer to a slice.
func freshSearch(ctx context.Context, es *testenv.ESEnv, alias string, body, hits any) error {
	data, _ := json.Marshal(body)
	res, err := esapi.SearchRequest{Index: []string{alias}, Body: bytes.NewReader(data)}.Do(ctx, es.Search)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.IsError() {
		return fmt.Errorf("search %s: %s", alias, res.String())
	}
	var sr struct {
		Hits struct {
			Hits any `json:"hits"`
		} `json:"hits"`
	}
	sr.Hits.Hits = hits
	if err := json.NewDecoder(res.Body).Decode(&sr); err != nil {
		return fmt.Errorf("search %s: %w", alias, err)
	}
	return nil
}

// freshSearchSeqs searches alias for those of the documents ids that
// hold a seq of at least from (in the root or in any order) and returns
// the largest seq each holds. Documents not changed since from are not
// returned, which keeps the poller's load on Elasticsearch small.
func freshSearchSeqs(ctx context.Context, es *testenv.ESEnv, alias string, ids []string, from int64) (map[int]int64, error) {
	body := map[string]any{
		"size": len(ids), "_source": []string{"seq", "orders.seq"},
		"query": map[string]any{"bool": map[string]any{"filter": []any{
			map[string]any{"ids": map[string]any{"values": ids}},
			map[string]any{"bool": map[string]any{"minimum_should_match": 1, "should": []any{
				map[string]any{"range": map[string]any{"seq": map[string]any{"gte": from}}},
				map[string]any{"range": map[string]any{"orders.seq": map[string]any{"gte": from}}},
			}}},
		}}},
	}
	var hits []struct {
		ID     string `json:"_id"`
		Source struct {
			Seq    int64 `json:"seq"`
			Orders []struct {
				Seq int64 `json:"seq"`
			} `json:"orders"`
		} `json:"_source"`
	}
	if err := freshSearch(ctx, es, alias, body, &hits); err != nil {
		return nil, err
	}
	out := make(map[int]int64, len(hits))
	for _, h := range hits {
		doc, err := strconv.Atoi(h.ID)
		if err != nil {
			return nil, fmt.Errorf("search %s: _id %q is not a customer id", alias, h.ID)
		}
		m := h.Source.Seq
		for _, o := range h.Source.Orders {
			m = max(m, o.Seq)
		}
		out[doc] = m
	}
	return out, nil
}

// freshRefreshes is what an index's refresh statistics count: refreshes
// of its primaries, scheduled or asked for, and the time they took.
type freshRefreshes struct {
	count int64
	took  time.Duration
}

func (r freshRefreshes) since(before freshRefreshes) freshRefreshes {
	return freshRefreshes{r.count - before.count, r.took - before.took}
}

func (r freshRefreshes) mean() time.Duration {
	if r.count == 0 {
		return 0
	}
	return r.took / time.Duration(r.count)
}

// freshRefreshStats reads alias's refresh statistics (_stats/refresh):
// how often Elasticsearch made its writes searchable over a phase, and
// how long that took, the part of commit → searchable decant cannot
// shorten.
func freshRefreshStats(ctx context.Context, tb testing.TB, es *testenv.ESEnv, alias string) freshRefreshes {
	tb.Helper()
	res, err := esapi.IndicesStatsRequest{Index: []string{alias}, Metric: []string{"refresh"}}.Do(ctx, es.Client)
	if err != nil {
		tb.Fatalf("refresh statistics of %s: %v", alias, err)
	}
	defer res.Body.Close()
	var st struct {
		All struct {
			Primaries struct {
				Refresh struct {
					Total  int64 `json:"total"`
					Millis int64 `json:"total_time_in_millis"`
				} `json:"refresh"`
			} `json:"primaries"`
		} `json:"_all"`
	}
	if res.IsError() || json.NewDecoder(res.Body).Decode(&st) != nil {
		tb.Fatalf("refresh statistics of %s: %s", alias, res.String())
	}
	r := st.All.Primaries.Refresh
	return freshRefreshes{r.Total, time.Duration(r.Millis) * time.Millisecond}
}

// freshCount counts the documents of alias matching query (a JSON query
// clause) after a refresh.
func freshCount(ctx context.Context, es *testenv.ESEnv, alias, query string) (int, error) {
	if res, err := (esapi.IndicesRefreshRequest{Index: []string{alias}}).Do(ctx, es.Client); err == nil {
		res.Body.Close()
	}
	res, err := esapi.CountRequest{Index: []string{alias}, Body: strings.NewReader(`{"query":` + query + `}`)}.Do(ctx, es.Client)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.IsError() {
		return 0, fmt.Errorf("count %s: %s", alias, res.String())
	}
	var c struct {
		Count int `json:"count"`
	}
	err = json.NewDecoder(res.Body).Decode(&c)
	return c.Count, err
}

// freshPercentile returns the q-quantile of ds (nearest rank); 0 when empty.
func freshPercentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func freshLSN(tb testing.TB, pg *testenv.PG) string {
	tb.Helper()
	var lsn string
	if err := pg.Pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		tb.Fatal(err)
	}
	return lsn
}

// freshCPU returns the user+system CPU seconds of process pid so far
// (/proc/<pid>/stat, in USER_HZ = 100 ticks a second).
func freshCPU(tb testing.TB, pid int) float64 {
	tb.Helper()
	own, _, ok := procCPU(pid)
	if !ok {
		tb.Fatalf("/proc/%d/stat: unreadable", pid)
	}
	return own
}
