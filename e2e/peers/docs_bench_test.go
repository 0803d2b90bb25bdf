package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/internal/testenv"
)

// docsSchema is the documents workload: customers, their orders, the
// orders' lines. Link columns are in the before image (decant needs it).
const docsSchema = `
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL REFERENCES customers(id), status text NOT NULL,
  total numeric(12,2) NOT NULL, placed_at timestamptz NOT NULL);
CREATE TABLE order_lines (id int PRIMARY KEY, order_id int NOT NULL REFERENCES orders(id), sku text NOT NULL,
  quantity int NOT NULL, price numeric(10,2) NOT NULL);
CREATE INDEX ON orders (customer_id);
CREATE INDEX ON order_lines (order_id);
ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE order_lines REPLICA IDENTITY FULL;`

// docsSeed writes n customers, each with orders 2c-1 and 2c; order o has
// lines 2o-1 and 2o.
func docsSeed(n int) string {
	return fmt.Sprintf(`
INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com' FROM generate_series(1, %[1]d) g;
INSERT INTO orders SELECT g, 1 + (g - 1) / 2, CASE WHEN g %% 3 = 0 THEN 'paid' ELSE 'new' END, (g %% 1000) + 0.5,
  timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, %[2]d) g;
INSERT INTO order_lines SELECT g, 1 + (g - 1) / 2, 'SKU-' || (g %% 500), 1 + g %% 3, (g %% 90) + 0.99 FROM generate_series(1, %[3]d) g;
ANALYZE;`, n, 2*n, 4*n)
}

// docsPeer starts one tool that keeps index in step with the customer
// documents of pg, from scratch (initial load, then changes). It returns
// the tool's process, Redis's for pgsync, when the tool's set-up began
// (pgsync's bootstrap; decant's process start) and the CPU seconds of
// set-up steps that already ended.
type docsPeer func(b *testing.B, pg *testenv.PG, k *testenv.KafkaEnv, dir, index string) (tool, helper *proc, started time.Time, setupCPU float64)

// docsResult is one tool's figures on the documents workload.
type docsResult struct {
	docs      int
	load      time.Duration // set-up start → every document searchable
	loadCPU   float64
	loadDB    float64 // database CPU seconds during the initial load
	idle      float64 // cores used with no changes
	fresh     latencies
	freshCPU  float64
	freshDB   float64
	peakRSS   int64
	helperCPU float64 // Redis, for pgsync: over the whole run
	helperRSS int64
}

func (r docsResult) docsPerSec() float64    { return float64(r.docs) / r.load.Seconds() }
func (r docsResult) loadCPUPer1k() float64  { return r.loadCPU * 1000 / float64(r.docs) }
func (r docsResult) freshCPUPer1k() float64 { return r.freshCPU * 1000 / float64(len(r.fresh)) }
func (r docsResult) loadDBPer1k() float64   { return r.loadDB * 1000 / float64(r.docs) }
func (r docsResult) freshDBPer1k() float64  { return r.freshDB * 1000 / float64(len(r.fresh)) }

// BenchmarkPeersDocuments compares `decant run` with pgsync 7.3.0 (daemon
// mode, with Redis) on customer documents with nested orders and lines, in
// the same Elasticsearch, one tool at a time, each on its own database with
// the same rows and the same changes, after an unmeasured load of a tenth
// of the customers by each tool has warmed the servers up:
//
//   - throughput: initial load of N customers (2N orders, 4N lines), from
//     the start of the tool's set-up until all N documents are searchable:
//     decant run creates its publication and slot itself, pgsync's
//     `bootstrap` (triggers, slot) runs before `pgsync --daemon` and is
//     counted, like the JVM-free start-up of both;
//     CPU seconds per 1,000 documents over the same span, of the tool and
//     of the PostgreSQL processes serving it;
//   - idle CPU: cores used over 5s without changes;
//   - freshness: then RATE single-row updates per second for SECONDS
//     seconds, a third each to a customer, an order and a line, each with a
//     unique value, each on another customer; the delay from the COMMIT
//     returning until a search finds the new value; p50 and p99, and CPU
//     seconds per 1,000 changes meanwhile (tool and PostgreSQL, not
//     counting the writes themselves);
//   - peak RSS (VmHWM) of the tool at the end. Kafka (decant) and Redis
//     (pgsync) are servers the tools use and are not counted; Redis's
//     figures are printed for information.
//
// At the end every document of the two indexes is compared (pgsync's
// "_meta" field removed, arrays sorted by id): they must be the same. Then
// decant's documents are bulk loaded straight into fresh indexes with its
// mappings (directBulkCeiling): what Elasticsearch alone takes for them on
// these cores, printed with max_throughput_ratio, that rate over
// pgsync's — the highest throughput ratio any tool could reach here.
//
// DECANT_BENCH_PEER_CUSTOMERS sets N (default 20000), DECANT_BENCH_PEER_DOC_RATE
// and DECANT_BENCH_PEER_DOC_SECONDS the change load (default 5/s for 60s: on
// 2 shared cores pgsync falls behind at 10/s with these changes, which
// alternate tables so that it writes each in its own bulk request). pgsync
// reads its own settings from the environment (NUM_WORKERS, …).
func BenchmarkPeersDocuments(b *testing.B) {
	n := envInt("DECANT_BENCH_PEER_CUSTOMERS", 20000)
	rate, secs := envInt("DECANT_BENCH_PEER_DOC_RATE", 5), envInt("DECANT_BENCH_PEER_DOC_SECONDS", 60)
	changes := min(rate*secs, n)
	k, es := testenv.Kafka(b), testenv.Elasticsearch(b)
	install(b, "pgsync.sh")
	decIndex, pgsIndex := es.Prefix+"_decant_customer", es.Prefix+"_pgsync_customer"
	// The servers' JVMs (Kafka, Elasticsearch) compile their hot code in
	// the first minutes of work: the tool measured first on new servers
	// paid for it (decant's 200,000-customer load took 95 s there against
	// 43 s one run later). A load of a tenth of the customers by each tool,
	// not measured, warms both up.
	warm := max(n/10, 1000)
	warmDocs(b, k, es, "decant", es.Prefix+"_warm_decant", warm, startDecantRun)
	warmDocs(b, k, es, "pgsync", es.Prefix+"_warm_pgsync", warm, startPgsync)
	dec := runDocs(b, k, es, "decant", decIndex, n, changes, rate, startDecantRun)
	pgs := runDocs(b, k, es, "pgsync", pgsIndex, n, changes, rate, startPgsync)

	same, diff := compareIndexes(b, es.URL, decIndex, pgsIndex, n)
	for _, r := range []struct {
		name string
		res  docsResult
	}{{"decant", dec}, {"pgsync", pgs}} {
		fmt.Printf("BENCH peers documents %-6s initial_load docs=%d took=%.2fs throughput=%.0f docs/s cpu=%.3fs/1k docs db_cpu=%.3fs/1k docs\n",
			r.name, n, r.res.load.Seconds(), r.res.docsPerSec(), r.res.loadCPUPer1k(), r.res.loadDBPer1k())
		extra := ""
		if r.res.helperRSS > 0 {
			extra = fmt.Sprintf(" (not counted: redis cpu=%.1fs peak_rss=%s)", r.res.helperCPU, mb(r.res.helperRSS))
		}
		fmt.Printf("BENCH peers documents %-6s idle_cpu=%.3f cores freshness(commit→searchable, %d changes at %d/s) p50=%s p99=%s cpu=%.3fs/1k changes db_cpu=%.3fs/1k changes peak_rss=%s%s\n",
			r.name, r.res.idle, len(r.res.fresh), rate, ms(r.res.fresh.percentile(0.5)), ms(r.res.fresh.percentile(0.99)), r.res.freshCPUPer1k(), r.res.freshDBPer1k(), mb(r.res.peakRSS), extra)
	}
	fmt.Printf("BENCH peers documents same_documents=%d/%d\n", same, n)
	// What Elasticsearch alone takes for decant's documents here: neither
	// tool can load faster, so a throughput ratio above
	// direct_bulk ÷ pgsync's rate is out of reach on these cores.
	ceil := directBulkCeiling(b, es, decIndex)
	fmt.Printf("BENCH peers documents ceiling direct_bulk=%.0f docs/s (%s, best of 3 cells, into a fresh index with decant's mappings) decant_over_direct=%.2f pgsync_over_direct=%.2f max_throughput_ratio=%.2f\n",
		ceil.docsPerSec, ceil.cell, dec.docsPerSec()/ceil.docsPerSec, pgs.docsPerSec()/ceil.docsPerSec, ceil.docsPerSec/pgs.docsPerSec())
	tp := ratio(dec.docsPerSec(), pgs.docsPerSec())
	fr := ratio(float64(dec.fresh.percentile(0.99)), float64(pgs.fresh.percentile(0.99)))
	lc := ratio(dec.loadCPUPer1k(), pgs.loadCPUPer1k())
	fc := ratio(dec.freshCPUPer1k(), pgs.freshCPUPer1k())
	ld := ratio(dec.loadDBPer1k(), pgs.loadDBPer1k())
	fd := ratio(dec.freshDBPer1k(), pgs.freshDBPer1k())
	rss := ratio(float64(dec.peakRSS), float64(pgs.peakRSS))
	fmt.Printf("BENCH peers documents ratio decant/pgsync throughput=%.2f (higher is better) freshness_p99=%.2f cpu_per_1k_docs=%.2f cpu_per_1k_changes=%.2f db_cpu_per_1k_docs=%.2f db_cpu_per_1k_changes=%.2f peak_rss=%.2f (lower is better)\n",
		tp, fr, lc, fc, ld, fd, rss)
	b.ReportMetric(tp, "throughput-ratio")
	b.ReportMetric(fr, "freshness-p99-ratio")
	b.ReportMetric(lc, "cpu-load-ratio")
	b.ReportMetric(fc, "cpu-changes-ratio")
	b.ReportMetric(rss, "rss-ratio")
	if same != n {
		b.Fatalf("the two indexes differ in %d of %d documents (pgsync/schema.json must give decant/customer.yaml's documents); first: %s", n-same, n, diff)
	}
}

// runDocs measures one tool on a fresh database.
func runDocs(b *testing.B, k *testenv.KafkaEnv, es *testenv.ESEnv, name, index string, n, changes, rate int, start docsPeer) docsResult {
	b.Helper()
	pg, p, helper, res := loadDocs(b, k, es, name, index, n, start)
	b.Logf("%s: initial load of %d documents took %s", name, n, res.load.Round(time.Millisecond))
	res.idle = idleCores(p)
	res.fresh, res.freshCPU, res.freshDB = docsFreshness(b, pg, es.URL, index, p, n, changes, rate)
	res.peakRSS = p.peakRSS()
	if helper != nil {
		res.helperCPU, res.helperRSS = helper.cpu(), helper.peakRSS()
	}
	stopDocs(p, helper)
	return res
}

// warmDocs runs one tool's initial load of n customers on a fresh
// database, not measured, and stops it.
func warmDocs(b *testing.B, k *testenv.KafkaEnv, es *testenv.ESEnv, name, index string, n int, start docsPeer) {
	b.Helper()
	_, p, helper, res := loadDocs(b, k, es, name+"-warm-up", index, n, start)
	b.Logf("%s: warm-up load of %d documents took %s", name, n, res.load.Round(time.Millisecond))
	stopDocs(p, helper)
}

// loadDocs seeds a fresh database with n customers, starts the tool on it
// and waits until index counts n documents: the initial load's figures.
func loadDocs(b *testing.B, k *testenv.KafkaEnv, es *testenv.ESEnv, name, index string, n int, start docsPeer) (*testenv.PG, *proc, *proc, docsResult) {
	b.Helper()
	ctx := testenv.Ctx(b)
	pg := testenv.Postgres(b)
	pg.Exec(b, docsSchema)
	pg.Exec(b, docsSeed(n))
	p, helper, started, setupCPU := start(b, pg, k, filepath.Join(b.TempDir(), name), index)
	db0 := dbCPU(b, pg)
	waitUntil(b, p, fmt.Sprintf("%s to make %d documents searchable in %s", name, n, index), 15*time.Minute, 200*time.Millisecond, func() (bool, error) {
		c, err := esCount(ctx, es.URL, index)
		return c >= n, err
	})
	return pg, p, helper, docsResult{docs: n, load: time.Since(started), loadCPU: setupCPU + p.cpu(), loadDB: dbCPUSince(b, pg, db0)}
}

func stopDocs(p, helper *proc) {
	p.stop()
	if helper != nil {
		helper.stop()
	}
}

// docsChange is change i of the freshness phase: the same for every tool.
// It sets a unique value in a customer, one of its orders or one of its
// lines; no two changes touch the same customer.
func docsChange(perm []int, i int) (customer int, sql string, args []any) {
	c := perm[i]
	mark := fmt.Sprintf("fresh-%d", i)
	switch i % 3 {
	case 0:
		return c, `UPDATE customers SET name = $2 WHERE id = $1`, []any{c, mark}
	case 1:
		return c, `UPDATE orders SET status = $2 WHERE id = $1`, []any{2 * c, mark}
	default:
		return c, `UPDATE order_lines SET sku = $2 WHERE id = $1`, []any{2 * (2*c - 1), mark}
	}
}

// docsFreshness runs the changes at rate per second and returns the delay
// of each from its commit until a search of index returns the customer
// document with the new value, and the tool's and the database's CPU
// seconds meanwhile.
func docsFreshness(b *testing.B, pg *testenv.PG, esURL, index string, p *proc, n, changes, rate int) (latencies, float64, float64) {
	b.Helper()
	ctx := testenv.Ctx(b)
	perm := rand.New(rand.NewPCG(8, 11)).Perm(n)[:changes]
	for i := range perm {
		perm[i]++
	}
	f := newFreshness(changes)
	pending := map[int]int{} // customer id → change; under f.mu
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for pctx.Err() == nil {
			f.mu.Lock()
			ids := make([]string, 0, len(pending))
			for c := range pending {
				if len(ids) < 1000 {
					ids = append(ids, strconv.Itoa(c))
				}
			}
			f.mu.Unlock()
			if len(ids) == 0 {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			var r searchResult
			_, err := testenv.ESRequest(pctx, http.MethodPost, esURL+"/"+url.PathEscape(index)+"/_search",
				map[string]any{"size": len(ids), "query": map[string]any{"ids": map[string]any{"values": ids}}}, &r)
			now := time.Now()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			f.mu.Lock()
			for _, h := range r.Hits.Hits {
				c, _ := strconv.Atoi(h.ID)
				i, ok := pending[c]
				if ok && bytes.Contains(h.Source, []byte(`"fresh-`+strconv.Itoa(i)+`"`)) {
					f.seen(i, now)
					delete(pending, c)
				}
			}
			f.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return f.measure(ctx, b, pg, p, rate, 5*time.Minute, "became searchable in "+index,
		func(w *pgxpool.Pool, i int) error {
			_, sql, args := docsChange(perm, i)
			_, err := w.Exec(ctx, sql, args...)
			return err
		},
		func(i int) { c, _, _ := docsChange(perm, i); pending[c] = i })
}

type searchResult struct {
	Hits struct {
		Hits []testenv.Hit `json:"hits"`
	} `json:"hits"`
}

// compareIndexes reads every document of both indexes and returns how many
// of the n customers are the same in both (after normalize), and the first
// difference.
func compareIndexes(b *testing.B, esURL, left, right string, n int) (int, string) {
	b.Helper()
	ctx := testenv.Ctx(b)
	l, r := readIndex(ctx, b, esURL, left), readIndex(ctx, b, esURL, right)
	same, first := 0, ""
	for id := 1; id <= n; id++ {
		key := strconv.Itoa(id)
		a, okA := l[key]
		c, okC := r[key]
		if okA && okC && reflect.DeepEqual(normalize(a), normalize(c)) {
			same++
			continue
		}
		if first == "" {
			la, _ := json.Marshal(normalize(a))
			lc, _ := json.Marshal(normalize(c))
			first = fmt.Sprintf("id %s: %s has %s, %s has %s", key, left, la, right, lc)
		}
	}
	return same, first
}

// readIndex returns every document of index by _id.
func readIndex(ctx context.Context, b *testing.B, esURL, index string) map[string]any {
	b.Helper()
	hits, err := testenv.ESHits(ctx, esURL, url.PathEscape(index), true)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]any{}
	for _, h := range hits {
		var v any
		if err := json.Unmarshal(h.Source, &v); err != nil {
			b.Fatal(err)
		}
		out[h.ID] = v
	}
	return out
}

// normalize makes two encodings of one document comparable: pgsync's
// "_meta" bookkeeping field is dropped, arrays of objects are sorted by
// their "id" (pgsync does not order them), numbers are compared as numbers
// (19.90 = 19.9) and timestamps in UTC.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if k != "_meta" {
				out[k] = normalize(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normalize(x)
		}
		slices.SortStableFunc(out, func(a, c any) int {
			ia, _ := a.(map[string]any)["id"].(float64)
			ic, _ := c.(map[string]any)["id"].(float64)
			switch {
			case ia < ic:
				return -1
			case ia > ic:
				return 1
			}
			return 0
		})
		return out
	case string:
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC().Format(time.RFC3339Nano)
		}
		return v
	}
	return v
}

// startDecantRun runs `decant run` (initial snapshot, all stages in one
// process) with decant/customer.yaml. Its slot and topics are named after
// the database: each run starts from nothing.
func startDecantRun(b *testing.B, pg *testenv.PG, k *testenv.KafkaEnv, dir, index string) (*proc, *proc, time.Time, float64) {
	testenv.WriteFile(b, filepath.Join(dir, "customer.yaml"), template(b, "decant/customer.yaml", map[string]string{"INDEX": index}))
	cfg := testenv.WriteFile(b, filepath.Join(dir, "decant.yaml"), template(b, "decant/decant.yaml", map[string]string{
		"DSN": pg.DSN, "SLOT": pg.Name, "BROKERS": strings.Join(k.Brokers, ", "), "TOPIC_PREFIX": k.Prefix + "." + pg.Name,
		"PARTITIONS": "6", "ES_URL": testenv.ESURL(), "MAPPING": "customer.yaml", "SNAPSHOT_MODE": "initial",
	}))
	p := startProc(b, dir, "decant-run", testenv.DecantCmd(b, nil, "run", "--config", cfg))
	return p, nil, p.started, 0
}

// startPgsync starts Redis (not timed: a server, like Kafka for decant),
// runs pgsync's bootstrap and starts `pgsync --daemon` with
// pgsync/schema.json (e2e/peers/pgsync.sh).
func startPgsync(b *testing.B, pg *testenv.PG, k *testenv.KafkaEnv, dir, index string) (*proc, *proc, time.Time, float64) {
	script := filepath.Join(testenv.RepoRoot(), "e2e", "peers", "pgsync.sh")
	port := freePortNumber(b)
	redis := startProc(b, dir, "redis", command(nil, "bash", script, "redis", port, filepath.Join(dir, "redis")))
	waitUntil(b, redis, "redis to listen on 127.0.0.1:"+port, time.Minute, 50*time.Millisecond, func() (bool, error) {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
		}
		return err == nil, err
	})
	schema := testenv.WriteFile(b, filepath.Join(dir, "schema.json"), template(b, "pgsync/schema.json", map[string]string{"DATABASE": pg.Name, "INDEX": index}))
	u, err := url.Parse(pg.DSN)
	if err != nil {
		b.Fatal(err)
	}
	esu, err := url.Parse(testenv.ESURL())
	if err != nil {
		b.Fatal(err)
	}
	env := []string{
		"PG_HOST=" + u.Hostname(), "PG_PORT=" + u.Port(), "PG_USER=" + u.User.Username(),
		"ELASTICSEARCH_SCHEME=" + esu.Scheme, "ELASTICSEARCH_HOST=" + esu.Hostname(), "ELASTICSEARCH_PORT=" + esu.Port(),
		"REDIS_HOST=127.0.0.1", "REDIS_PORT=" + port, "CHECKPOINT_PATH=" + dir + "/",
	}
	// pgsync gives up (exits) when one bulk request takes longer than its
	// 10s default; the shared test node can stall that long under other
	// people's tests, and decant retries. The environment can override it.
	if os.Getenv("ELASTICSEARCH_TIMEOUT") == "" {
		env = append(env, "ELASTICSEARCH_TIMEOUT=120")
	}
	boot := startProc(b, dir, "pgsync-bootstrap", command(env, "bash", script, "bootstrap", "--config", schema))
	<-boot.Done()
	if code := boot.Cmd.ProcessState.ExitCode(); code != 0 {
		b.Fatalf("pgsync bootstrap exited %d\n%s", code, boot.Tail(40))
	}
	bootCPU := (boot.Cmd.ProcessState.UserTime() + boot.Cmd.ProcessState.SystemTime()).Seconds()
	p := startProc(b, dir, "pgsync", command(env, "bash", script, "sync", "--config", schema, "--daemon"))
	return p, redis, boot.started, bootCPU
}
