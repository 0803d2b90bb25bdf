package binary

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/opsapi"
)

// TestWaitUnderLoad (issue 19): many concurrent /v1/wait callers, each
// waiting again and again for the latest write's LSN (a row written every
// 100 ms), behind a bearer token. Every wait succeeds, and what they cost
// decant's servers stays bounded whatever their number: the tracker's
// PostgreSQL queries (one shared poll, every 50 ms at most) and the
// search refreshes (shared, at most one per http.wait_refresh_interval,
// 100 ms). 200 callers for 10 s; with DECANT_HEAVY=1 1,000 for 30 s. It
// logs the figures docs/operations.md quotes.
func TestWaitUnderLoad(t *testing.T) {
	callers, seconds := 200, 10
	if heavy() {
		callers, seconds = 1000, 30
	}
	p := newPipeline(t)
	addr := testenv.FreePort(t)
	const token = "load test token"
	p.Start("run", []string{"DECANT_HTTP_LISTEN=" + addr, "DECANT_HTTP_TOKEN=" + token}, "run")
	base := "http://" + addr
	cl := opsapi.NewClient(base).WithToken(token)
	testenv.WaitFor(t, "decant run's /readyz", 90*time.Second, func() (bool, error) {
		req, _ := http.NewRequest(http.MethodGet, base+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		res.Body.Close()
		return res.StatusCode == 200, fmt.Errorf("/readyz %d", res.StatusCode)
	})
	// The latest write's LSN, written every 100 ms.
	var latest atomic.Value
	latest.Store(lsn(t, p))
	ctx, stop := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second)
	defer stop()
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; ctx.Err() == nil; i++ {
			var l string
			err := p.PG.Pool.QueryRow(context.Background(), `WITH w AS (INSERT INTO items VALUES ($1, 'load', 1)) SELECT pg_current_wal_lsn()::text`, 1000+i).Scan(&l)
			if err != nil {
				t.Error(err)
				return
			}
			latest.Store(l)
			writes.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
	})
	xacts := func() float64 {
		var n int64
		if err := p.PG.Pool.QueryRow(context.Background(), `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return float64(n)
	}
	before, xacts0 := scrapeCounters(t, base, token), xacts()
	began := time.Now()
	var waits, failures atomic.Int64
	var firstErr atomic.Value
	for range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := cl.Wait(context.Background(), latest.Load().(string), time.Minute)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				waits.Add(1)
			}
		})
	}
	wg.Wait()
	took := time.Since(began).Seconds()
	time.Sleep(time.Second) // PostgreSQL publishes a backend's counts within a second
	after, xacts1 := scrapeCounters(t, base, token), xacts()
	// Every transaction in the database but the writer's: decant's stages,
	// its tracker, and these two reads.
	pgRate := (xacts1 - xacts0 - float64(writes.Load())) / took
	queries := (after["decant_watermark_queries_total"] - before["decant_watermark_queries_total"]) / took
	refreshes := (after["decant_ops_wait_refreshes_total"] - before["decant_ops_wait_refreshes_total"]) / took
	t.Logf("%d callers for %.1f s: %d waits (%.0f/s), %d failed; %d writes; decant's PostgreSQL queries for them %.1f/s (PostgreSQL counted %.1f transactions/s from decant in all), search refreshes %.1f/s",
		callers, took, waits.Load(), float64(waits.Load())/took, failures.Load(), writes.Load(), queries, pgRate, refreshes)
	if failures.Load() > 0 {
		t.Errorf("%d waits failed, e.g. %v", failures.Load(), firstErr.Load())
	}
	if waits.Load() < int64(callers) {
		t.Errorf("%d waits in %.0f s, want at least one per caller", waits.Load(), took)
	}
	// One shared poll reads the slot at most every 50 ms: 20/s (a little
	// more while readiness and watermark calls run).
	if queries > 25 {
		t.Errorf("%.1f tracker queries/s for %d waiters, want at most 25 (one shared poll)", queries, callers)
	}
	if refreshes > 10.5 {
		t.Errorf("%.1f refreshes/s, want at most 10 (one per 100 ms)", refreshes)
	}
}

// scrapeCounters reads decant's counters from /metrics.
func scrapeCounters(t *testing.T, base, token string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^(decant_[a-z_]+_total) ([0-9.e+]+)$`).FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] = v
	}
	for _, name := range []string{"decant_watermark_queries_total", "decant_ops_wait_refreshes_total"} {
		if _, ok := out[name]; !ok {
			t.Fatalf("/metrics has no %s", name)
		}
	}
	return out
}
