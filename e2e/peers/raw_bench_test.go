package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// rawSchema is the table of the raw-stream workload (as in the streamer's
// benchmark) and a procedure that writes a backlog of small transactions.
const rawSchema = `
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, total numeric(12,2), status text, placed_at timestamptz);
CREATE PROCEDURE fill_small(lo bigint, n int) LANGUAGE plpgsql AS $$
BEGIN FOR i IN 0..n/10-1 LOOP
  INSERT INTO orders SELECT g, g % 1000, g * 0.37, 'placed', '2026-11-30 10:00:00+00'::timestamptz + g * interval '1 second'
    FROM generate_series(lo + i*10, lo + i*10 + 9) g;
  COMMIT;
END LOOP; END $$;`

// rawShapes are the two WAL backlogs, written one after the other.
var rawShapes = []string{"one large transaction", "small transactions"}

// freshBase is the first id of the rows written by the freshness phase.
const freshBase = 10_000_000

// rawPeer starts one tool that streams the orders table of pg into Kafka
// and returns its process, the topic it writes and its replication slot.
type rawPeer func(b *testing.B, pg *testenv.PG, k *testenv.KafkaEnv, dir string) (p *proc, topic, slot string)

// rawResult is one tool's figures on the raw-stream workload.
type rawResult struct {
	rows     int
	drain    map[string]time.Duration // per shape
	drainCPU float64                  // CPU seconds over both drains
	drainDB  float64                  // database CPU seconds over both drains
	idle     float64                  // cores used with no changes
	fresh    latencies
	freshCPU float64
	freshDB  float64
	peakRSS  int64
}

func (r rawResult) rowsPerSec(shape string) float64 {
	return float64(r.rows) / r.drain[shape].Seconds()
}

func (r rawResult) cpuPer1k() float64   { return r.drainCPU * 1000 / float64(r.rows*len(rawShapes)) }
func (r rawResult) dbCPUPer1k() float64 { return r.drainDB * 1000 / float64(r.rows*len(rawShapes)) }

// BenchmarkPeersRawStream compares `decant stream` with Debezium 3.6.1
// (Kafka Connect 4.1.2 standalone, pgoutput, JSON without schemas) on the
// raw change stream, one tool at a time, each on its own database:
//
//   - throughput: the tool runs and has streamed a warm-up row; it is
//     paused (SIGSTOP) while a WAL backlog is written — N rows in one
//     transaction, then N rows in transactions of 10 — and resumed; the
//     clock runs from SIGCONT until the topic holds every row (sum of end
//     offsets). JVM start-up is not counted, and an unmeasured first round
//     of N/10 rows of each shape warms both tools up;
//   - CPU seconds per 1,000 rows over those drains (/proc, the tool's
//     process tree), and those of the PostgreSQL processes serving it
//     (walsender, queries);
//   - idle CPU: cores used over 5s without changes;
//   - freshness: then RATE single-row transactions per second for SECONDS
//     seconds; each row's delay from its COMMIT returning to its record
//     being fetched from the topic; p50 and p99;
//   - peak RSS (VmHWM) of the tool at the end.
//
// DECANT_BENCH_PEER_ROWS sets N (default 200000), DECANT_BENCH_PEER_RAW_RATE
// and DECANT_BENCH_PEER_RAW_SECONDS the freshness load (default 50/s for 40s).
// Debezium runs with debezium/connector.properties; DECANT_BENCH_DEBEZIUM_PROPS
// adds properties to it, separated by ";" (e.g. "poll.interval.ms=20").
func BenchmarkPeersRawStream(b *testing.B) {
	rows := envInt("DECANT_BENCH_PEER_ROWS", 200000)
	rows -= rows % 10
	rate, secs := envInt("DECANT_BENCH_PEER_RAW_RATE", 50), envInt("DECANT_BENCH_PEER_RAW_SECONDS", 40)
	k := testenv.Kafka(b)
	install(b, "debezium.sh")
	dec := runRaw(b, k, "decant", rows, rate, secs, startDecantStream)
	dbz := runRaw(b, k, "debezium", rows, rate, secs, startDebezium)

	for _, r := range []struct {
		name string
		res  rawResult
	}{{"decant", dec}, {"debezium", dbz}} {
		for _, shape := range rawShapes {
			fmt.Printf("BENCH peers raw %-8s backlog=%q rows=%d drain=%.2fs throughput=%.0f rows/s\n",
				r.name, shape, rows, r.res.drain[shape].Seconds(), r.res.rowsPerSec(shape))
		}
		fmt.Printf("BENCH peers raw %-8s cpu=%.3fs/1k changes db_cpu=%.3fs/1k changes idle_cpu=%.3f cores freshness(commit→in Kafka, %d changes at %d/s) p50=%s p99=%s peak_rss=%s\n",
			r.name, r.res.cpuPer1k(), r.res.dbCPUPer1k(), r.res.idle, len(r.res.fresh), rate, ms(r.res.fresh.percentile(0.5)), ms(r.res.fresh.percentile(0.99)), mb(r.res.peakRSS))
	}
	large, small := rawShapes[0], rawShapes[1]
	tl := ratio(dec.rowsPerSec(large), dbz.rowsPerSec(large))
	ts := ratio(dec.rowsPerSec(small), dbz.rowsPerSec(small))
	fr := ratio(float64(dec.fresh.percentile(0.99)), float64(dbz.fresh.percentile(0.99)))
	cpu := ratio(dec.cpuPer1k(), dbz.cpuPer1k())
	dbc := ratio(dec.dbCPUPer1k(), dbz.dbCPUPer1k())
	rss := ratio(float64(dec.peakRSS), float64(dbz.peakRSS))
	fmt.Printf("BENCH peers raw ratio decant/debezium throughput_large_tx=%.2f throughput_small_tx=%.2f (higher is better) freshness_p99=%.2f cpu_per_1k_changes=%.2f db_cpu_per_1k_changes=%.2f peak_rss=%.2f (lower is better)\n",
		tl, ts, fr, cpu, dbc, rss)
	b.ReportMetric(tl, "throughput-large-ratio")
	b.ReportMetric(ts, "throughput-small-ratio")
	b.ReportMetric(fr, "freshness-p99-ratio")
	b.ReportMetric(cpu, "cpu-ratio")
	b.ReportMetric(rss, "rss-ratio")
}

// runRaw measures one tool on a fresh database.
func runRaw(b *testing.B, k *testenv.KafkaEnv, name string, rows, rate, secs int, start rawPeer) rawResult {
	b.Helper()
	ctx := testenv.Ctx(b)
	pg := testenv.Postgres(b)
	pg.Exec(b, rawSchema)
	dir := filepath.Join(b.TempDir(), name)
	p, topic, slot := start(b, pg, k, dir)
	count := func() (int64, error) { return topicRecords(ctx, k.Admin, topic) }
	// Rows written before the slot exists are not streamed: wait for it.
	waitSlotActive(b, p, pg, slot)

	// An active slot does not mean the tool streams from before a row
	// written now (Debezium starts at the WAL position it reads after
	// creating the slot): write warm-up rows until one arrives, then let
	// the rest arrive.
	warm := 0
	waitUntil(b, p, name+" to stream a warm-up row into "+topic, 5*time.Minute, 2*time.Second, func() (bool, error) {
		n, err := count()
		if n == 0 {
			warm--
			pg.Exec(b, `INSERT INTO orders VALUES ($1, 0, 0, 'warm-up', now())`, warm)
		}
		return n > 0, err
	})
	time.Sleep(3 * time.Second)
	want, err := count()
	if err != nil {
		b.Fatal(err)
	}
	res := rawResult{rows: rows, drain: map[string]time.Duration{}}
	next := 1
	// A first, unmeasured round of a tenth of the rows warms the tool up
	// (JIT, buffers), as it would be after running for a while.
	for round, n := range []int{max(10, rows/100*10), rows} {
		for i, shape := range rawShapes {
			lo := next
			next += n
			p.pause()
			if i == 0 {
				pg.Exec(b, fmt.Sprintf(`INSERT INTO orders SELECT g, g %% 1000, g * 0.37, 'placed', '2026-11-30 10:00:00+00'::timestamptz + g * interval '1 second' FROM generate_series(%d, %d) g`, lo, lo+n-1))
			} else {
				pg.Exec(b, fmt.Sprintf(`CALL fill_small(%d, %d)`, lo, n))
			}
			want += int64(n)
			cpu0, db0, started := p.cpu(), dbCPU(b, pg), time.Now()
			p.resume()
			waitUntil(b, p, fmt.Sprintf("%s to drain a backlog of %d rows (%s) into %s", name, n, shape, topic), 15*time.Minute, 10*time.Millisecond, func() (bool, error) {
				c, err := count()
				return c >= want, err
			})
			if round == 0 {
				continue
			}
			res.drain[shape] = time.Since(started)
			res.drainCPU += p.cpu() - cpu0
			res.drainDB += dbCPUSince(b, pg, db0)
			b.Logf("%s drained %d rows (%s) in %s", name, n, shape, res.drain[shape].Round(time.Millisecond))
		}
	}
	res.idle = idleCores(p)
	res.fresh, res.freshCPU, res.freshDB = rawFreshness(b, pg, k, p, topic, rate*secs, rate)
	res.peakRSS = p.peakRSS()
	p.stop()
	return res
}

// rawFreshness inserts n rows, one per transaction, at rate per second and
// returns each row's delay from its commit to its record being fetched from
// topic, and the tool's and the database's CPU seconds meanwhile.
func rawFreshness(b *testing.B, pg *testenv.PG, k *testenv.KafkaEnv, p *proc, topic string, n, rate int) (latencies, float64, float64) {
	b.Helper()
	ctx := testenv.Ctx(b)
	cl, err := k.TailClient(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()

	f := newFreshness(n)
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			now := time.Now()
			f.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				var key struct {
					ID int64 `json:"id"`
				}
				if json.Unmarshal(r.Key, &key) != nil || key.ID < freshBase || key.ID >= freshBase+int64(n) {
					return
				}
				f.seen(int(key.ID-freshBase), now)
			})
			f.mu.Unlock()
		}
	}()
	// Let the consumer connect before the clock matters.
	time.Sleep(time.Second)
	return f.measure(ctx, b, pg, p, rate, 3*time.Minute, "reached "+topic,
		func(w *pgxpool.Pool, i int) error {
			_, err := w.Exec(ctx, `INSERT INTO orders VALUES ($1, 7, 19.90, 'fresh', now())`, freshBase+i)
			return err
		}, nil)
}

// startDecantStream runs `decant stream` (snapshot_mode never) on the
// orders table.
func startDecantStream(b *testing.B, pg *testenv.PG, k *testenv.KafkaEnv, dir string) (*proc, string, string) {
	prefix := k.Prefix + ".decant"
	testenv.WriteFile(b, filepath.Join(dir, "orders.yaml"), template(b, "decant/orders.yaml", nil))
	cfg := testenv.WriteFile(b, filepath.Join(dir, "decant.yaml"), template(b, "decant/decant.yaml", map[string]string{
		"DSN": pg.DSN, "SLOT": "decant_raw", "BROKERS": strings.Join(k.Brokers, ", "), "TOPIC_PREFIX": prefix,
		"PARTITIONS": "6", "ES_URL": testenv.ESURL(), "MAPPING": "orders.yaml", "SNAPSHOT_MODE": "never",
	}))
	p := startProc(b, dir, "decant-stream", testenv.DecantCmd(b, nil, "stream", "--config", cfg))
	return p, wire.RawTopic(prefix, "public", "orders"), "decant_raw"
}

// startDebezium runs the Debezium PostgreSQL connector on a Kafka Connect
// standalone worker (e2e/peers/debezium.sh run).
func startDebezium(b *testing.B, pg *testenv.PG, k *testenv.KafkaEnv, dir string) (*proc, string, string) {
	u, err := url.Parse(pg.DSN)
	if err != nil {
		b.Fatal(err)
	}
	prefix := k.Prefix + ".dbz"
	vars := map[string]string{
		"BROKERS": strings.Join(k.Brokers, ","), "DIR": dir, "REST_PORT": freePortNumber(b),
		"NAME": "bench-" + pg.Name, "PG_HOST": u.Hostname(), "PG_PORT": u.Port(), "PG_USER": u.User.Username(),
		"PG_DATABASE": strings.TrimPrefix(u.Path, "/"), "TOPIC_PREFIX": prefix, "SLOT": "dbz_raw",
		"PUBLICATION": "dbz", "PARTITIONS": "6",
	}
	worker := testenv.WriteFile(b, filepath.Join(dir, "worker.properties"), template(b, "debezium/worker.properties", vars))
	props := template(b, "debezium/connector.properties", vars)
	for kv := range strings.SplitSeq(os.Getenv("DECANT_BENCH_DEBEZIUM_PROPS"), ";") {
		if kv = strings.TrimSpace(kv); kv != "" {
			props += kv + "\n"
			b.Logf("debezium: added %s to connector.properties", kv)
		}
	}
	conn := testenv.WriteFile(b, filepath.Join(dir, "connector.properties"), props)
	p := startProc(b, dir, "debezium", command(nil, "bash", filepath.Join(testenv.RepoRoot(), "e2e", "peers", "debezium.sh"), "run", worker, conn))
	return p, prefix + ".public.orders", "dbz_raw"
}
