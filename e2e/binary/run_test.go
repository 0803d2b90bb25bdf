package binary

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/opsapi"
)

func heavy() bool { return os.Getenv("DECANT_HEAVY") == "1" }

// TestReadYourWritesSeparateProcesses: with stream, map and build running
// as three processes, each iteration writes a row, reads
// pg_current_wal_lsn(), calls /v1/wait on the build process, and searches
// Elasticsearch: the write must be found every time (PRODUCT.md §7).
func TestReadYourWritesSeparateProcesses(t *testing.T) {
	iterations := 100
	if heavy() {
		iterations = 1000
	}
	p := newPipeline(t)
	// Rows present before the start make the initial snapshot take a while,
	// so the first iterations run while it is in progress (regression: the
	// slot's consistent point made /v1/wait return before the snapshot rows
	// were in Kafka).
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'before ' || g, 1 FROM generate_series(100001, 110000) g`)
	addr := testenv.FreePort(t)
	p.Start("stream", []string{"DECANT_HTTP_LISTEN=" + testenv.FreePort(t)}, "stream")
	p.Start("map", []string{"DECANT_HTTP_LISTEN=" + testenv.FreePort(t)}, "map")
	p.Start("build", []string{"DECANT_HTTP_LISTEN=" + addr}, "build")
	testenv.WaitFor(t, "the build process's /readyz", 60*time.Second, func() (bool, error) {
		code, body, err := testenv.Get("http://" + addr + "/readyz")
		return code == 200, fmt.Errorf("%d %s %v", code, body, err)
	})
	var total time.Duration
	cl := opsapi.NewClient("http://" + addr)
	for i := 1; i <= iterations; i++ {
		name := fmt.Sprintf("written-%d", i)
		p.PG.Exec(t, `INSERT INTO items VALUES ($1, $2, $3)`, i, name, 1+i%2)
		lsn := lsn(t, p)
		started := time.Now()
		// Odd iterations use the Go client, even ones plain HTTP.
		if i%2 == 1 {
			if err := cl.Wait(context.Background(), lsn, 2*time.Minute); err != nil {
				t.Fatalf("iteration %d: opsapi.Wait(%s): %v", i, lsn, err)
			}
		} else if code, body, err := testenv.Get("http://" + addr + "/v1/wait?lsn=" + url.QueryEscape(lsn) + "&timeout=2m"); err != nil || code != 200 {
			t.Fatalf("iteration %d: /v1/wait?lsn=%s: %d %s %v", i, lsn, code, body, err)
		}
		total += time.Since(started)
		q := url.QueryEscape(fmt.Sprintf(`name.keyword:"%s"`, name))
		code, body, err := testenv.Get(p.ES.URL + "/" + p.Alias + "/_search?q=" + q)
		if err != nil || code != 200 || !strings.Contains(body, `"total":{"value":1,`) {
			t.Fatalf("iteration %d: write %q not found right after /v1/wait returned: %d %s %v", i, name, code, body, err)
		}
	}
	t.Logf("%d iterations: every write searchable after /v1/wait; mean wait %s", iterations, (total / time.Duration(iterations)).Round(time.Millisecond))
	code, _, _ := testenv.Get("http://" + addr + "/v1/wait?lsn=FFFFFFFF/0&timeout=300ms")
	if code != 408 {
		t.Fatalf("/v1/wait for a future LSN: status %d, want 408", code)
	}
	if err := cl.Wait(context.Background(), "FFFFFFFF/0", 300*time.Millisecond); err != opsapi.ErrTimeout {
		t.Fatalf("opsapi.Wait for a future LSN: %v, want ErrTimeout", err)
	}
	if code, body, _ := testenv.Get("http://" + addr + "/v1/wait?lsn=nonsense"); code != 400 || !strings.Contains(body, "pg_current_wal_lsn") {
		t.Fatalf("/v1/wait?lsn=nonsense: %d %s, want 400 saying what to pass", code, body)
	}
	wm, err := cl.Watermarks(context.Background())
	if err != nil || wm["build"] == nil || wm["stream"] == nil {
		t.Fatalf("opsapi.Watermarks: %v %v", wm, err)
	}
}

// TestRunSurvivesSIGTERMAndKill: a workload runs while `decant run` is
// stopped with SIGTERM (must exit 0 and log no error) and later killed with
// -9; after restarts, Elasticsearch converges to the database.
func TestRunSurvivesSIGTERMAndKill(t *testing.T) {
	p := newPipeline(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ops atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(7, 8))
		for ctx.Err() == nil {
			id := 1 + rng.IntN(2000)
			var err error
			switch rng.IntN(4) {
			case 0:
				_, err = p.PG.Pool.Exec(ctx, `DELETE FROM items WHERE id = $1`, id)
			case 1:
				_, err = p.PG.Pool.Exec(ctx, `UPDATE categories SET title = title || '.' WHERE id = $1`, 1+id%2)
			default:
				_, err = p.PG.Pool.Exec(ctx, `INSERT INTO items VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET name = excluded.name, category_id = excluded.category_id`,
					id, fmt.Sprintf("n%d", rng.IntN(1e6)), 1+rng.IntN(2))
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("workload: %v", err)
				return
			}
			ops.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	run := p.Start("run-1", nil, "run")
	time.Sleep(8 * time.Second)
	if code := run.Term(time.Minute); code != 0 {
		t.Fatalf("decant run exited %d after SIGTERM, want 0; log:\n%s", code, run.Output())
	}
	if strings.Contains(run.Output(), "level=ERROR") {
		t.Fatalf("decant run logged an error on SIGTERM:\n%s", run.Output())
	}
	run = p.Start("run-2", nil, "run")
	time.Sleep(6 * time.Second)
	run.Kill()
	run = p.Start("run-3", nil, "run")
	time.Sleep(4 * time.Second)
	cancel()
	<-done
	p.WaitConverged(3 * time.Minute)
	t.Logf("%d operations with one SIGTERM and one kill -9: converged", ops.Load())
	if code := run.Term(time.Minute); code != 0 {
		t.Fatalf("final SIGTERM: exit %d\n%s", code, run.Output())
	}
}

// TestStatusShowsSlotLag: with the pipeline stopped and writes happening,
// `decant status` and /metrics (of any decant process) show slot lag; once
// `decant run` catches up it is near zero.
func TestStatusShowsSlotLag(t *testing.T) {
	p := newPipeline(t)
	run := p.Start("run-1", nil, "run")
	p.PG.Exec(t, `INSERT INTO items VALUES (1, 'one', 1)`)
	p.WaitConverged(2 * time.Minute)
	if code := run.Term(time.Minute); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'bulk', 1 FROM generate_series(2, 5000) g`)
	lag := func() (int64, string) {
		out, err := p.Decant("status", "--json")
		if err != nil && !strings.Contains(out, `"slot"`) {
			t.Fatalf("decant status: %v\n%s", err, out)
		}
		var n int64
		i := strings.Index(out, `"lag_bytes": `)
		if i < 0 {
			t.Fatalf("no lag_bytes in status:\n%s", out)
		}
		fmt.Sscan(out[i+len(`"lag_bytes": `):], &n)
		return n, out
	}
	if n, out := lag(); n <= 0 || !strings.Contains(out, "no streamer holds the slot") {
		t.Fatalf("stopped pipeline: status lag_bytes = %d, want > 0 with a warning:\n%s", n, out)
	}
	// /metrics of a process that is not the streamer reports the lag too.
	addr := testenv.FreePort(t)
	build := p.Start("build", []string{"DECANT_HTTP_LISTEN=" + addr}, "build")
	metric := func() float64 {
		var v float64 = -1
		testenv.WaitFor(t, "/metrics of the build process", 60*time.Second, func() (bool, error) {
			_, body, err := testenv.Get("http://" + addr + "/metrics")
			for _, line := range strings.Split(body, "\n") {
				if strings.HasPrefix(line, "decant_slot_lag_bytes ") {
					fmt.Sscan(strings.TrimPrefix(line, "decant_slot_lag_bytes "), &v)
					return true, nil
				}
			}
			return false, err
		})
		return v
	}
	if v := metric(); v <= 0 {
		t.Fatalf("decant_slot_lag_bytes = %v while the streamer is stopped, want > 0", v)
	}
	build.Term(time.Minute)
	run = p.Start("run-2", nil, "run")
	p.WaitConverged(3 * time.Minute)
	testenv.WaitFor(t, "slot lag near zero after catching up", 60*time.Second, func() (bool, error) {
		n, _ := lag()
		return n < 64<<10, fmt.Errorf("lag %d bytes", n)
	})
	run.Term(time.Minute)
}

// TestRunWithOpenSearch (issue 17): `decant run` with OpenSearch as the
// only search engine (elasticsearch.urls empty): the alias is created on
// OpenSearch, every write is searchable there once /v1/wait returns (the
// refresh goes to OpenSearch), and a delete removes the document.
func TestRunWithOpenSearch(t *testing.T) {
	p := newPipeline(t)
	osEnv := testenv.OpenSearch(t)
	osEnv.Prefix = p.ES.Prefix // the pipeline's index names, deleted at cleanup
	addr := testenv.FreePort(t)
	p.Start("run", []string{"DECANT_HTTP_LISTEN=" + addr, "DECANT_ELASTICSEARCH_URLS=", "DECANT_OPENSEARCH_URLS=" + osEnv.URL}, "run")
	testenv.WaitFor(t, "decant run's /readyz", 90*time.Second, func() (bool, error) {
		code, body, err := testenv.Get("http://" + addr + "/readyz")
		return code == 200, fmt.Errorf("%d %s %v", code, body, err)
	})
	cl := opsapi.NewClient("http://" + addr)
	search := func(q string) string {
		code, body, err := testenv.Get(osEnv.URL + "/" + p.Alias + "/_search?q=" + url.QueryEscape(q))
		if err != nil || code != 200 {
			t.Fatalf("OpenSearch search %q: %d %s %v", q, code, body, err)
		}
		return body
	}
	for i := 1; i <= 20; i++ {
		name := fmt.Sprintf("on-opensearch-%d", i)
		p.PG.Exec(t, `INSERT INTO items VALUES ($1, $2, $3)`, i, name, 1+i%2)
		if err := cl.Wait(context.Background(), lsn(t, p), 2*time.Minute); err != nil {
			t.Fatalf("iteration %d: /v1/wait: %v", i, err)
		}
		if body := search(fmt.Sprintf(`name.keyword:"%s"`, name)); !strings.Contains(body, `"total":{"value":1,`) {
			t.Fatalf("iteration %d: %q not in OpenSearch right after /v1/wait: %s", i, name, body)
		}
	}
	p.PG.Exec(t, `DELETE FROM items WHERE id = 7`)
	if err := cl.Wait(context.Background(), lsn(t, p), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if body := search(`name.keyword:"on-opensearch-7"`); !strings.Contains(body, `"total":{"value":0,`) {
		t.Fatalf("item 7, deleted, is still in OpenSearch: %s", body)
	}
	// Nothing went to Elasticsearch: its sink is off.
	if code, _, _ := testenv.Get(p.ES.URL + "/" + p.Alias); code != 404 {
		t.Errorf("GET %s on Elasticsearch: %d, want 404 (the Elasticsearch sink is off)", p.Alias, code)
	}
}

// manyTables is an aggregate over eight tables: eight raw topics for the
// map stage to consume.
var manyTables = testenv.PipelineSpec{
	Schema: `
CREATE TABLE t1 (id int PRIMARY KEY, v text);
CREATE TABLE t2 (id int PRIMARY KEY, v text);
CREATE TABLE t3 (id int PRIMARY KEY, v text);
CREATE TABLE t4 (id int PRIMARY KEY, v text);
CREATE TABLE t5 (id int PRIMARY KEY, v text);
CREATE TABLE t6 (id int PRIMARY KEY, v text);
CREATE TABLE t7 (id int PRIMARY KEY, v text);
CREATE TABLE things (id int PRIMARY KEY, name text, t1_id int, t2_id int, t3_id int, t4_id int, t5_id int, t6_id int, t7_id int);
ALTER TABLE things REPLICA IDENTITY FULL;`,
	Aggregate: "thing",
	Mapping: `version: 1
schema: public
aggregates:
  thing:
    table: things
    columns: [id, name]
    relations:
      r1:
        table: t1
        references: t1_id
        columns: [v]
      r2:
        table: t2
        references: t2_id
        columns: [v]
      r3:
        table: t3
        references: t3_id
        columns: [v]
      r4:
        table: t4
        references: t4_id
        columns: [v]
      r5:
        table: t5
        references: t5_id
        columns: [v]
      r6:
        table: t6
        references: t6_id
        columns: [v]
      r7:
        table: t7
        references: t7_id
        columns: [v]
    elasticsearch:
      index: %s
      settings: {number_of_shards: 1, number_of_replicas: 0}
`,
	OracleSQL: `
SELECT t.id::text, jsonb_build_object('id', t.id, 'name', t.name, 'r1', (SELECT jsonb_build_object('v', x.v) FROM t1 x WHERE x.id = t.t1_id), 'r2', (SELECT jsonb_build_object('v', x.v) FROM t2 x WHERE x.id = t.t2_id), 'r3', (SELECT jsonb_build_object('v', x.v) FROM t3 x WHERE x.id = t.t3_id), 'r4', (SELECT jsonb_build_object('v', x.v) FROM t4 x WHERE x.id = t.t4_id), 'r5', (SELECT jsonb_build_object('v', x.v) FROM t5 x WHERE x.id = t.t5_id), 'r6', (SELECT jsonb_build_object('v', x.v) FROM t6 x WHERE x.id = t.t6_id), 'r7', (SELECT jsonb_build_object('v', x.v) FROM t7 x WHERE x.id = t.t7_id))
FROM things t`,
}

// TestFirstStartJoinsEachGroupOnce: on a first start no topic exists yet;
// the map and build stages create theirs before joining their groups, so
// each group's first generation assigns every topic and no rebalance
// follows. (Created after joining, each raw topic the group leader found
// later cost one more generation, one metadata refresh apart: 17 s before
// the map stage read its first row of the demo shop's seven tables.)
func TestFirstStartJoinsEachGroupOnce(t *testing.T) {
	p := testenv.NewPipeline(t, manyTables)
	p.PG.Exec(t, `INSERT INTO t1 SELECT g, 'v' || g FROM generate_series(1, 3) g; INSERT INTO t2 SELECT g, 'v' || g FROM generate_series(1, 3) g; INSERT INTO t3 SELECT g, 'v' || g FROM generate_series(1, 3) g; INSERT INTO t4 SELECT g, 'v' || g FROM generate_series(1, 3) g; INSERT INTO t5 SELECT g, 'v' || g FROM generate_series(1, 3) g; INSERT INTO t6 SELECT g, 'v' || g FROM generate_series(1, 3) g; INSERT INTO t7 SELECT g, 'v' || g FROM generate_series(1, 3) g`)
	p.PG.Exec(t, `INSERT INTO things SELECT g, 'thing ' || g, 1 + g % 3, 1 + g % 3, 1 + g % 3, 1 + g % 3, 1 + g % 3, 1 + g % 3, 1 + g % 3 FROM generate_series(1, 20) g`)
	addr := testenv.FreePort(t)
	p.Start("run", []string{"DECANT_HTTP_LISTEN=" + addr}, "run")
	p.WaitConverged(90 * time.Second)
	p.PG.Exec(t, `UPDATE t1 SET v = v || ' again'`)
	p.WaitConverged(90 * time.Second)
	code, body, err := testenv.Get("http://" + addr + "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	for _, stage := range []string{"map", "build"} {
		series := fmt.Sprintf(`decant_resolver_group_generations_total{stage=%q}`, stage)
		got := -1.0
		for line := range strings.Lines(body) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
				if _, err := fmt.Sscan(v, &got); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got != 1 {
			t.Errorf("%s = %v after a first start, want 1 (no rebalance)", series, got)
		}
	}
}
