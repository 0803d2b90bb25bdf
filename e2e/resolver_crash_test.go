package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestResolverKillNine is the differential test of issue 5 (acceptance 2)
// with the map and build stages in child processes that are killed with
// SIGKILL at random moments and restarted at once, while the random
// workload of TestResolverDifferential runs (and, when the workload ends
// first, while the stages drain it). Once the stages are quiet, every
// document in the aggregate topics and in Elasticsearch must equal the
// oracle's, and versions must never decrease per key in the aggregate
// topics. It reports the kills, the records each stage consumed again
// after a kill (duplicates) and the time to converge.
//
// DECANT_RESOLVER_OPS sets the operations (default 20000; 100000 with
// DECANT_HEAVY=1), DECANT_RESOLVER_KILLS the kills of each stage (default
// 5; 10 with DECANT_HEAVY=1), DECANT_RESOLVER_SEED the random seed.
func TestResolverKillNine(t *testing.T) {
	ops := resSize("DECANT_RESOLVER_OPS", 20000, 100000)
	kills := resSize("DECANT_RESOLVER_KILLS", 5, 10)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("DECANT_RESOLVER_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (DECANT_RESOLVER_SEED), %d operations, at least %d kills of each stage", seed, ops, kills)
	e := newResEnv(t, resShopSchema, resShopMapping)
	ctx := testenv.Ctx(t)
	resSeed(t, e, 100)
	e.startStreamer()
	polled := t.TempDir()
	stages := &resKillable{e: e, polled: polled, current: map[string]*testenv.Proc{}, gens: map[string]int{}, kills: map[string]int{}}
	for _, s := range []string{"map", "build"} {
		if err := stages.start(s); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(stages.report(t))

	// The first start backfills, as in TestResolverDifferential.
	for _, a := range []string{"customer", "product"} {
		resBackfill(ctx, t, e.cfg, e.pool, e.model, a, 3*time.Minute)
	}

	// One killer per stage (killLoop) until the workload is done and each
	// stage was killed often enough.
	workloadDone := make(chan struct{})
	killers := make(chan error, 2)
	kctx, stopKillers := context.WithCancel(ctx)
	var running sync.WaitGroup
	t.Cleanup(func() { stopKillers(); running.Wait() }) // a failed test stops them before its cleanups
	for i, s := range []string{"map", "build"} {
		r := rand.New(rand.NewPCG(seed, uint64(2+i)))
		running.Go(func() { killers <- stages.killLoop(kctx, s, r, kills, workloadDone) })
	}

	shop := &resShop{r: rand.New(rand.NewPCG(seed, 1)), next: 1_000_000}
	started := time.Now()
	// The workload goes on past ops until both stages were killed often
	// enough, so that every kill lands while changes keep coming.
	killed := func() bool { return stages.killed("map") >= kills && stages.killed("build") >= kills }
	done := resRunWorkload(t, e, shop, ops, killed, map[int]string{ops / 10: "TRUNCATE order_lines", ops / 4: "TRUNCATE customers CASCADE"}, nil)
	workloadTime := time.Since(started)
	close(workloadDone)
	t.Logf("workload: %d operations in %s (%d transactions rolled back, %d reloads)", done, workloadTime.Round(time.Millisecond), shop.failed, shop.reloads)
	for range 2 {
		if err := <-killers; err != nil {
			t.Fatal(err)
		}
	}
	e.waitQuiet(5 * time.Minute)
	converged := time.Now()
	for _, s := range []string{"map", "build"} {
		if c := stages.current[s]; c.Exited() {
			t.Fatalf("%s exited on its own: %v\n%s", c.Name, c.Err(), c.Tail(30))
		}
	}
	t.Logf("converged %s after the last restart, %s after the end of the workload",
		converged.Sub(stages.restarted).Round(time.Millisecond), converged.Sub(started.Add(workloadTime)).Round(time.Millisecond))
	e.compare(t)
	dup := stages.duplicates(t)
	t.Logf("kills: map %d, build %d; duplicates (records consumed again after a kill): map %d of %d raw records, build %d of %d refs",
		stages.kills["map"], stages.kills["build"], dup["map"].again, dup["map"].distinct, dup["build"].again, dup["build"].distinct)
}

// resKillable holds the current process of each stage and restarts it.
type resKillable struct {
	e       *resEnv
	polled  string // directory of the polled-record logs
	mu      sync.Mutex
	current map[string]*testenv.Proc
	gens    map[string]int
	kills   map[string]int
	history []string
	// restarted is when the last killed stage was started again.
	restarted time.Time
}

// start starts the next generation of stage.
func (k *resKillable) start(stage string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gens[stage]++
	gen := k.gens[stage]
	c, err := k.e.startChild(stage, gen, filepath.Join(k.polled, fmt.Sprintf("%s-%d.polled", stage, gen)))
	if err != nil {
		return err
	}
	k.current[stage] = c
	k.restarted = time.Now()
	return nil
}

// killed is how many times stage was killed so far.
func (k *resKillable) killed(stage string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kills[stage]
}

// killLoop kills stage with SIGKILL and restarts it at once, over and
// over, until done is closed and the stage was killed at least minKills
// times. Each generation is killed at a random moment 0-3s after it first
// consumed a record, so that kills land in the middle of its work (a
// batch being resolved or built, refs or documents in flight, offsets not
// yet committed), not while it is still joining its group; one that
// consumes nothing for 30s (nothing left to do) is killed anyway.
func (k *resKillable) killLoop(ctx context.Context, stage string, r *rand.Rand, minKills int, done <-chan struct{}) error {
	finished := false
	for {
		k.mu.Lock()
		c, gen, kills := k.current[stage], k.gens[stage], k.kills[stage]
		k.mu.Unlock()
		if finished && kills >= minKills {
			return nil
		}
		polled := filepath.Join(k.polled, fmt.Sprintf("%s-%d.polled", stage, gen))
		idle := time.After(30 * time.Second)
		how := "after its first record"
	waitWork:
		for {
			if fi, err := os.Stat(polled); err == nil && fi.Size() > 0 {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-done:
				finished, done = true, nil
			case <-idle:
				how = "after 30s without a record"
				break waitWork
			case <-time.After(50 * time.Millisecond):
			}
		}
		wait := time.Duration(r.IntN(3000)) * time.Millisecond
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if c.Exited() {
			return fmt.Errorf("%s exited on its own before its kill: %v\n%s", c.Name, c.Err(), c.Tail(30))
		}
		c.Kill()
		k.mu.Lock()
		k.kills[stage]++
		k.history = append(k.history, fmt.Sprintf("%s killed %s %s", c.Name, wait.Round(time.Millisecond), how))
		k.mu.Unlock()
		if err := k.start(stage); err != nil {
			return err
		}
		select {
		case <-done:
			finished, done = true, nil
		default:
		}
	}
}

// report returns a cleanup that logs the kills, and the logs of the last
// generations when the test failed.
func (k *resKillable) report(t *testing.T) func() {
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		t.Logf("kill history: %v", k.history)
		if t.Failed() {
			for _, c := range k.current {
				t.Logf("last lines of %s:\n%s", c.Name, c.Tail(20))
			}
		}
	}
}

// resRedelivery counts the consumed records of one stage over all its
// generations.
type resRedelivery struct {
	distinct int // distinct (topic, partition, offset)
	again    int // consumptions beyond the first
}

// duplicates reads the polled-record logs of every generation.
func (k *resKillable) duplicates(t *testing.T) map[string]resRedelivery {
	t.Helper()
	out := map[string]resRedelivery{}
	for _, stage := range []string{"map", "build"} {
		seen := map[string]bool{}
		var d resRedelivery
		for gen := 1; gen <= k.gens[stage]; gen++ {
			f, err := os.Open(filepath.Join(k.polled, fmt.Sprintf("%s-%d.polled", stage, gen)))
			if os.IsNotExist(err) {
				continue // killed before it polled anything
			}
			if err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if seen[sc.Text()] {
					d.again++
				} else {
					seen[sc.Text()] = true
					d.distinct++
				}
			}
			f.Close()
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
		}
		out[stage] = d
	}
	return out
}

// resRunWorkload runs at least ops random operations of shop in
// transactions of 1-8 operations (the workload of TestResolverDifferential
// and TestResolverKillNine), and
// goes on until enough returns true (nil: stop at ops). statements[i]
// replaces operation i (a TRUNCATE), events[i] runs after operation i. It
// returns the number of operations run.
func resRunWorkload(t *testing.T, e *resEnv, shop *resShop, ops int, enough func() bool, statements map[int]string, events map[int]func()) int {
	t.Helper()
	ctx := testenv.Ctx(t)
	conn, err := e.pg.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	reload := func() {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := shop.reload(ctx, tx); err != nil {
			t.Fatal(err)
		}
		_ = tx.Commit(ctx)
	}
	reload()
	done := 0
	for done < ops || enough != nil && !enough() {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 1 + shop.r.IntN(8)
		again := false
		var txErr error
		for i := 0; i < n && (enough != nil || done < ops); i++ {
			if sql, ok := statements[done]; ok {
				_, txErr = tx.Exec(ctx, sql)
				again = true
				t.Logf("%s after %d operations", sql, done)
			} else {
				var r bool
				r, txErr = shop.op(ctx, tx)
				again = again || r
			}
			if fn, ok := events[done]; ok {
				fn()
			}
			done++
			if txErr != nil {
				break
			}
		}
		if txErr != nil {
			_ = tx.Rollback(ctx)
			shop.failed++
			again = true
		} else if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if again {
			reload()
		}
	}
	return done
}
