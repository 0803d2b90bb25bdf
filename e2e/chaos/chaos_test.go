package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// size is one variant of the test.
type size struct {
	customers            int     // seed scale
	ops                  int64   // workload operations, at least
	rate                 float64 // operations per second
	kill9, rebalance     int     // process faults
	pause                int     // SIGSTOP of a map or build member
	kafka, es, pg        int     // server restarts
	outage               [2]time.Duration
	converge, initialBud time.Duration // time budgets
	chaosBudget          time.Duration // no new fault after this (0: none)
	pgWithJVMs           bool          // PostgreSQL restarts never overlap Kafka's or Elasticsearch's
}

var (
	short = size{customers: 1000, ops: 8_000, rate: 100, kill9: 8, rebalance: 4, pause: 3, kafka: 2, es: 2, pg: 3,
		outage: [2]time.Duration{0, 2 * time.Second}, converge: 3 * time.Minute, initialBud: 2 * time.Minute,
		chaosBudget: 2 * time.Minute, pgWithJVMs: true}
	heavy = size{customers: 3000, ops: 60_000, rate: 120, kill9: 16, rebalance: 8, pause: 6, kafka: 6, es: 6, pg: 6,
		outage: [2]time.Duration{time.Second, 8 * time.Second}, converge: 10 * time.Minute, initialBud: 5 * time.Minute}
)

// stageProcs are the supervised stage processes: an active streamer and
// a standby, and two members of each consumer group.
var stageProcs = []struct{ name, stage string }{
	{"stream-a", "stream"}, {"map-a", "map"}, {"map-b", "map"}, {"build-a", "build"}, {"build-b", "build"}, {"stream-b", "stream"},
}

// faultCounts counts the injected faults by kind.
// chaosSession is the map and build members' session timeout
// (resolver.session_timeout): shorter than some pauses.
const chaosSession = 8 * time.Second

type faultCounts struct{ kill9, kafka, es, pg, rebalance, pause atomic.Int64 }

func (c *faultCounts) total() int64 {
	return c.kill9.Load() + c.kafka.Load() + c.es.Load() + c.pg.Load() + c.rebalance.Load() + c.pause.Load()
}

// TestMain removes the decant binary built for this run.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveDecant()
	os.Exit(code)
}

// TestChaos: a random workload on the shop schema runs while decant's
// stage processes are killed with -9 and restarted, Kafka, Elasticsearch
// and PostgreSQL are restarted, and consumer groups rebalance. Afterwards
// every aggregate document in Elasticsearch and in the aggregate topics,
// and every row in the raw topics, must equal the database
// (PRODUCT.md §6.1–3). See doc.go for sizes and knobs.
func TestChaos(t *testing.T) {
	testenv.Integration(t)
	sz := short
	if os.Getenv("DECANT_HEAVY") == "1" {
		sz = heavy
	}
	if v, err := strconv.ParseInt(os.Getenv("DECANT_CHAOS_OPS"), 10, 64); err == nil && v > 0 {
		sz.ops = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("DECANT_CHAOS_RATE"), 64); err == nil && v > 0 {
		sz.rate = v
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("DECANT_CHAOS_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (DECANT_CHAOS_SEED), %d operations at %.0f/s", seed, sz.ops, sz.rate)
	started := time.Now()

	pg, k, es := testenv.Postgres(t), testenv.Kafka(t), testenv.Elasticsearch(t)
	srv := newServers(t)
	// Runs before the testenv cleanups (LIFO): they need every server up.
	t.Cleanup(func() {
		for _, kind := range serverKinds {
			if err := srv.up(context.Background(), kind); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	ctx := testenv.Ctx(t)

	pcfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["timezone"] = "UTC" // as decant's sessions: to_jsonb of timestamptz
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pg.Exec(t, shopSchema(t))
	pg.Exec(t, fmt.Sprintf(shopSeed, sz.customers))

	logDir, err := os.MkdirTemp("", "decant-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("DECANT_CHAOS_KEEP_LOGS") == "1" {
			t.Logf("stage process logs kept in %s", logDir)
			return
		}
		os.RemoveAll(logDir)
	})
	if err := os.MkdirAll(filepath.Join(logDir, "mappings"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		path := filepath.Join(logDir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("mappings/shop.yaml", fmt.Sprintf(shopMapping, es.Prefix))
	config := write("decant.yaml", fmt.Sprintf(`postgres:
  dsn: %s
  publication: decant
  slot: chaos_%s
kafka:
  brokers: [%s]
  topic_prefix: %s
  partitions: 4
elasticsearch:
  urls: [%s]
mappings: [mappings/*.yaml]
resolver:
  session_timeout: %s
http:
  listen: ""
`, pg.DSN, testenv.Suffix(), strings.Join(k.Brokers, ","), k.Prefix, es.URL, chaosSession))
	bin := testenv.Decant(t)

	v := &validator{pool: pool, adm: k.Admin, brokers: k.Brokers, prefix: k.Prefix, esURL: es.URL,
		alias: func(agg string) string { return es.Prefix + "-" + agg }}
	f := newFleet(bin, config, logDir)
	t.Cleanup(f.stopAll) // before the servers' cleanup
	for _, p := range stageProcs[:len(stageProcs)-1] {
		if err := f.start(p.name, p.stage); err != nil {
			t.Fatal(err)
		}
	}

	var counts faultCounts
	// A crash mid-snapshot: the streamer drops the slot, snapshots again
	// and tombstones what the first attempt wrote of rows gone since.
	testenv.WaitFor(t, "the initial snapshot's first raw record", time.Minute, func() (bool, error) {
		ends, err := k.Admin.ListEndOffsets(ctx, wire.RawTopic(k.Prefix, "public", "customers"))
		if err != nil {
			return false, nil
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += max(o.Offset, 0) })
		return n > 0, nil
	})
	f.signal("stream-a", syscall.SIGKILL, 500*time.Millisecond)
	counts.kill9.Add(1)
	t.Log("fault: kill -9 stream-a during the initial snapshot")

	// The initial snapshot builds every document; then the standby joins.
	initial := time.Now()
	if res := converge(ctx, t, v, sz.initialBud); len(res.mismatches) > 0 {
		reportFailure(t, f, res, "the initial snapshot did not converge")
		return
	}
	t.Logf("initial snapshot converged in %s", time.Since(initial).Round(100*time.Millisecond))
	if err := f.start("stream-b", "stream"); err != nil {
		t.Fatal(err)
	}
	// From now on the log cleaner compacts the raw topics within seconds
	// (decant gives them a day): a map member that lags behind a kill, a
	// pause or a rebalance may find records compacted away, and must
	// repair the documents they concerned.
	fastCompaction(ctx, t, k.Admin, k.Prefix)

	watchCtx, stopWatch := context.WithCancel(ctx)
	watch := &versionWatch{}
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); watch.run(watchCtx, v, 3*time.Second) }()

	w := &workload{pool: pool, r: rand.New(rand.NewPCG(seed, 1)), rate: sz.rate}
	if err := w.loadMax(ctx); err != nil {
		t.Fatal(err)
	}
	var faultsDone atomic.Bool
	workDone := make(chan struct{})
	go func() {
		defer close(workDone)
		w.run(ctx, func(ops int64) bool { return ops >= sz.ops && faultsDone.Load() }, []int64{sz.ops / 3, sz.ops * 2 / 3})
	}()

	// Two fault schedules run at once: server restarts, and process
	// kills and rebalances. Each spreads its faults over the workload.
	duration := time.Duration(float64(sz.ops) / sz.rate * float64(time.Second))
	var wg sync.WaitGroup
	var faultErrs []string
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		faultErrs = append(faultErrs, err.Error())
		errMu.Unlock()
	}
	// Two fault schedules run at once, each spreading its faults over the
	// workload: the slow JVM restarts (Kafka, Elasticsearch), and process
	// kills, rebalances and PostgreSQL restarts.
	inject := func(r *rand.Rand, kind string) {
		switch kind {
		case "kill9":
			t.Logf("fault: kill -9 %s", killRandom(f, r))
			counts.kill9.Add(1)
		case "rebalance":
			t.Logf("fault: rebalance: %s", rebalance(ctx, f, r))
			counts.rebalance.Add(1)
		case "pause":
			// Up to 14 s: past the session timeout (8 s) a paused member
			// is a zombie, whose partitions go to the others while it
			// holds batches; a build zombie must be fenced.
			name := []string{"map-a", "map-b", "build-a", "build-b"}[r.IntN(4)]
			d := time.Second + time.Duration(r.IntN(13000))*time.Millisecond
			f.pause(ctx, name, d)
			counts.pause.Add(1)
			past := ""
			if d > chaosSession {
				past = ", past its session timeout"
			}
			t.Logf("fault: %s paused (SIGSTOP) for %s%s", name, d.Round(100*time.Millisecond), past)
		default:
			t0 := time.Now()
			if err := srv.down(ctx, kind); err != nil {
				fail(err)
			}
			also := ""
			if r.IntN(2) == 0 { // a crash while the server is away
				also = ", kill -9 " + killRandom(f, r) + " meanwhile"
				counts.kill9.Add(1)
			}
			sleepBetween(ctx, r, sz.outage[0], sz.outage[1])
			if err := srv.up(ctx, kind); err != nil {
				fail(err)
			}
			map[string]*atomic.Int64{"kafka": &counts.kafka, "es": &counts.es, "pg": &counts.pg}[kind].Add(1)
			t.Logf("fault: %s restarted (away %s%s)", kind, time.Since(t0).Round(100*time.Millisecond), also)
		}
	}
	plans := []struct {
		kinds map[string]int
		cost  time.Duration // a fault's own duration, roughly
	}{
		{map[string]int{"kafka": sz.kafka, "es": sz.es}, 20 * time.Second},
		{map[string]int{"kill9": sz.kill9, "rebalance": sz.rebalance, "pause": sz.pause, "pg": sz.pg}, 2 * time.Second},
	}
	if sz.pgWithJVMs { // a PostgreSQL shutdown waits for the streamer, which waits for Kafka
		plans[0].kinds["pg"], plans[1].kinds["pg"] = sz.pg, 0
	}
	chaosStart := time.Now()
	var skipped atomic.Int64
	for i, plan := range plans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(2+i)))
			kinds := schedule(r, plan.kinds)
			for n, kind := range kinds {
				sleepGap(ctx, r, duration/time.Duration(len(kinds)+1)-plan.cost)
				if ctx.Err() != nil {
					return
				}
				if sz.chaosBudget > 0 && time.Since(chaosStart) > sz.chaosBudget {
					skipped.Add(int64(len(kinds) - n))
					return
				}
				inject(r, kind)
			}
		}()
	}
	wg.Wait()
	faultsDone.Store(true)
	t.Logf("last fault healed after %s", time.Since(initial).Round(time.Second))
	<-workDone
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
	if n := skipped.Load(); n > 0 {
		t.Logf("%d faults not injected: the fault phase is limited to %s", n, sz.chaosBudget)
	}
	if len(faultErrs) > 0 {
		t.Errorf("fault injection failed:\n%s", strings.Join(faultErrs, "\n"))
	}
	quietFrom := time.Now() // the workload stops only after the last fault healed
	t.Logf("workload: %d operations in %d transactions (%d rolled back on purpose, %d failed by faults, %d TRUNCATEs) in %s",
		w.ops.Load(), w.committed.Load(), w.rolledBack.Load(), w.failed.Load(), w.truncates.Load(), time.Since(initial).Round(time.Second))
	t.Logf("failed transactions by cause: %v", w.errors)

	res := converge(ctx, t, v, sz.converge)
	convergeTime := time.Since(quietFrom)
	stopWatch()
	<-watchDone
	res.mismatches = append(res.mismatches, watch.violations...)

	self, term := f.exits()
	summary := fmt.Sprintf("CHAOS operations=%d faults=%d (kill9=%d, kafka=%d, es=%d, pg=%d, rebalance=%d, pause=%d) duplicates=%d mismatches=%d converge=%.1fs",
		w.ops.Load(), counts.total(), counts.kill9.Load(), counts.kafka.Load(), counts.es.Load(), counts.pg.Load(), counts.rebalance.Load(), counts.pause.Load(),
		res.rawDups+res.aggDups, len(res.mismatches), convergeTime.Seconds())
	fmt.Println(summary)
	if path := os.Getenv("DECANT_CHAOS_SUMMARY"); path != "" {
		if fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintf(fh, "%s %s seed=%d total=%s\n", time.Now().UTC().Format(time.RFC3339), summary, seed, time.Since(started).Round(time.Second))
			fh.Close()
		}
	}
	t.Logf("duplicates: %d raw records, %d aggregate records; %d Elasticsearch version samples; %s",
		res.rawDups, res.aggDups, watch.samples, strings.Join(res.counts, "; "))
	t.Logf("stage exits the test did not cause (restarted): %d %v", len(self), self)
	if len(term) > 0 {
		t.Logf("runs that did not exit 0 after SIGTERM: %v", term)
	}
	if len(res.mismatches) > 0 {
		reportFailure(t, f, res, "the sinks did not converge to the database")
		return
	}
	selfCheck(ctx, t, f, v, pool)
	t.Logf("total %s", time.Since(started).Round(time.Second))
}

// selfCheck proves the validator can fail: with every stage stopped, one
// customer is renamed, and each place that holds the name must now be
// reported (its raw row, both aggregates, both sinks).
func selfCheck(ctx context.Context, t *testing.T, f *fleet, v *validator, pool *pgxpool.Pool) {
	f.stopAll()
	var id int
	if err := pool.QueryRow(ctx, `UPDATE customers SET name = 'validator self-check' WHERE id = (SELECT min(id) FROM customers) RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	res, err := v.validate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf(`{"id":%d}`, id)
	for _, where := range []string{"raw customers", "customer aggregate topic", "customer elasticsearch"} {
		found := false
		for _, m := range res.mismatches {
			found = found || strings.HasPrefix(m, where+": "+key+" differs")
		}
		if !found {
			t.Errorf("validator self-check: renaming customer %d with the pipeline stopped was not reported in %s; got %d mismatches: %.2000s",
				id, where, len(res.mismatches), strings.Join(res.mismatches, "\n"))
		}
	}
	// The order aggregate embeds the customer's name in each of its orders.
	var orders int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE customer_id = $1`, id).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if want := 3 + 2*orders; len(res.mismatches) != want {
		t.Errorf("validator self-check: %d mismatches, want %d (raw row, customer in two sinks, %d orders in two sinks):\n%s",
			len(res.mismatches), want, orders, strings.Join(res.mismatches, "\n"))
	}
}

// schedule returns the kinds, each as often as counts says, in rounds:
// each round is a shuffled set of the kinds with occurrences left, so
// every kind comes early and faults of one kind are spread out.
func schedule(r *rand.Rand, counts map[string]int) []string {
	left := map[string]int{}
	for k, n := range counts {
		left[k] = n
	}
	var out []string
	for {
		var round []string
		for _, k := range sortedKeys(left) {
			if left[k] > 0 {
				round = append(round, k)
				left[k]--
			}
		}
		if len(round) == 0 {
			return out
		}
		r.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		out = append(out, round...)
	}
}

// sleepGap sleeps 0.5–1.5 × mean (at least a second).
func sleepGap(ctx context.Context, r *rand.Rand, mean time.Duration) {
	mean = max(mean, 2*time.Second)
	sleepBetween(ctx, r, mean/2, mean*3/2)
}

func sleepBetween(ctx context.Context, r *rand.Rand, lo, hi time.Duration) {
	d := lo + time.Duration(r.Int64N(int64(hi-lo)+1))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// killRandom kills one supervised stage process with SIGKILL; it is
// restarted 0–3 s later.
func killRandom(f *fleet, r *rand.Rand) string {
	p := stageProcs[r.IntN(len(stageProcs))].name
	f.signal(p, syscall.SIGKILL, time.Duration(r.IntN(3000))*time.Millisecond)
	return p
}

// rebalance forces a consumer group rebalance: a third member joins and
// leaves, or a member stops (SIGTERM) and comes back.
func rebalance(ctx context.Context, f *fleet, r *rand.Rand) string {
	switch r.IntN(3) {
	case 0, 1:
		stage := []string{"map", "build"}[r.IntN(2)]
		name := stage + "-x"
		if err := f.start(name, stage); err != nil {
			return err.Error()
		}
		sleepBetween(ctx, r, 4*time.Second, 10*time.Second)
		code := f.stop(name)
		return fmt.Sprintf("%s joined the %s group and left (exit %d)", name, stage, code)
	default:
		name := []string{"map-a", "map-b", "build-a", "build-b"}[r.IntN(4)]
		f.signal(name, syscall.SIGTERM, time.Duration(1000+r.IntN(4000))*time.Millisecond)
		return name + " stopped with SIGTERM and restarted"
	}
}

// converge waits until the stages are quiet and the sinks equal the
// database, or budget passes; it returns the last validation.
func converge(ctx context.Context, t *testing.T, v *validator, budget time.Duration) *result {
	deadline := time.Now().Add(budget)
	lastLog := time.Now()
	var last *result
	var target uint64
	for {
		if target == 0 {
			var lsn string
			if err := v.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err == nil {
				target, _ = wire.ParseLSN(lsn)
			}
		}
		quiet, why := v.quiet(ctx, target)
		if !quiet && time.Since(lastLog) > 15*time.Second {
			t.Logf("converging: %s", why)
			lastLog = time.Now()
		}
		if quiet || time.Now().After(deadline) {
			res, err := v.validate(ctx)
			switch {
			case err != nil:
				last = &result{mismatches: []string{"validation could not read: " + err.Error()}}
			case len(res.mismatches) == 0:
				return res
			default:
				last = res
			}
			if time.Now().After(deadline) {
				if !quiet {
					last.mismatches = append(last.mismatches, "not quiet at the deadline: "+why)
				}
				return last
			}
		}
		select {
		case <-ctx.Done():
			return &result{mismatches: []string{ctx.Err().Error()}}
		case <-time.After(time.Second):
		}
	}
}

// quiet reports whether the slot confirmed target and both consumer
// groups committed everything; otherwise it says what is behind.
func (v *validator) quiet(ctx context.Context, target uint64) (bool, string) {
	var confirmed *string
	if err := v.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE database = current_database()`).Scan(&confirmed); err != nil || confirmed == nil {
		return false, fmt.Sprintf("slot: %v", err)
	}
	if lsn, _ := wire.ParseLSN(*confirmed); target == 0 || lsn < target {
		return false, "slot confirmed " + *confirmed
	}
	var raw, refs []string
	for _, table := range sortedKeys(shopTables) {
		raw = append(raw, wire.RawTopic(v.prefix, "public", table))
	}
	for _, agg := range sortedKeys(aggregates) {
		refs = append(refs, wire.RefsTopic(v.prefix, agg))
	}
	for _, g := range []struct {
		group  string
		topics []string
	}{{v.prefix + ".map", raw}, {v.prefix + ".build", refs}} {
		lag, err := testenv.GroupLag(ctx, v.adm, g.group, g.topics...)
		if err != nil || lag > 0 {
			return false, fmt.Sprintf("group %s: lag %d %v", g.group, lag, err)
		}
	}
	return true, ""
}

// reportFailure fails the test with every mismatch (the first 40 in full)
// and the last lines of each stage process's log.
func reportFailure(t *testing.T, f *fleet, res *result, why string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d mismatches\n", why, len(res.mismatches))
	for i, m := range res.mismatches {
		if i == 40 {
			fmt.Fprintf(&b, "  … and %d more\n", len(res.mismatches)-40)
			break
		}
		fmt.Fprintf(&b, "  %s\n", m)
	}
	for _, c := range res.counts {
		fmt.Fprintf(&b, "  count: %s\n", c)
	}
	for _, p := range stageProcs {
		fmt.Fprintf(&b, "--- last lines of %s:\n%s\n", p.name, f.logTail(p.name, 15))
	}
	t.Error(b.String())
}

// fastCompaction makes the log cleaner compact every raw topic within
// seconds: segments roll every 2 s, any dirty ratio is worth cleaning, and
// no record is protected by min.compaction.lag.ms.
func fastCompaction(ctx context.Context, t *testing.T, adm *kadm.Client, prefix string) {
	t.Helper()
	set := func(k, v string) kadm.AlterConfig { return kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v} }
	var topics []string
	for _, table := range sortedKeys(shopTables) {
		topics = append(topics, wire.RawTopic(prefix, "public", table))
	}
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{set("segment.ms", "2000"), set("min.cleanable.dirty.ratio", "0.01"), set("min.compaction.lag.ms", "0")}, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp {
		if r.Err != nil {
			t.Fatalf("fast compaction of %s: %v", r.Name, r.Err)
		}
	}
}
