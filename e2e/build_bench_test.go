package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/wire"
)

// BenchmarkBuildVsCopy is the build stage's ceiling benchmark (issue 8).
// It backfills N customer aggregates (the backfill benchmark's schema: a
// root with a many-to-one and a one-to-many relation) through the refs
// topic into resolver.Builder with a sink that only records what it is
// given — so the figure is the build stage alone: consuming refs,
// coalescing, opening each batch's snapshot, running the Build statement,
// assembling documents and committing offsets. The clock runs from the
// first ref enqueued to the last document handed to the sink.
//
// The ceiling is the same Build statement run for the same batches (the
// very id lists the builder handed to its sink — in the same round, or the
// round before when COPY goes first, which it does every other round — so
// the same batch size and the same ids per statement), with the same concurrency (Workers
// connections), as `COPY (…) TO STDOUT` read into io.Discard: PostgreSQL
// building the documents with nothing done with them. COPY takes no
// parameters, so the id arrays are written into the statement as
// literals.
//
// It prints one line starting with "BENCH build". DECANT_BENCH_BUILD_AGGREGATES
// sets N (default 200000).
//
//	go test ./e2e -run '^$' -bench '^BenchmarkBuildVsCopy$' -benchtime 1x -timeout 60m
func BenchmarkBuildVsCopy(b *testing.B) {
	n := benchEnvInt("DECANT_BENCH_BUILD_AGGREGATES", 200_000)
	pg, k := testenv.Postgres(b), testenv.Kafka(b)
	ctx := testenv.Ctx(b)
	model, pool, log := benchCustomers(ctx, b, pg, n, k.Prefix)
	agg := model.Aggregate("customer")
	// The defaults of `decant build`: 6 partitions, batches of 500 ids,
	// 4 workers.
	cfg := resolver.Config{Kafka: []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, TopicPrefix: k.Prefix, Logger: log}
	const batch, workers = 500, 4
	cfg.BatchSize, cfg.Workers = batch, workers
	sink := &recordingSink{}
	builder, err := resolver.NewBuilder(cfg, model, pool, sink)
	if err != nil {
		b.Fatal(err)
	}
	defer resRunBuilder(ctx, b, builder)()
	resWaitGroupStable(b, k, k.Prefix+".build")

	var builtTimes, drainedTimes []time.Duration
	rounds, statements := 0, 0
	var batches [][]json.RawMessage
	drain := func() {
		d, rows, err := buildCopyDrain(ctx, pg.DSN, agg, batches, workers)
		if err != nil {
			b.Fatal(err)
		}
		if rows < int64(n) {
			b.Fatalf("COPY drained %d rows, want %d", rows, n)
		}
		drainedTimes = append(drainedTimes, d)
	}
	for b.Loop() {
		rounds++
		// COPY and decant alternate which goes first (from the second
		// round on: COPY replays the id lists of the round before), so
		// neither always finds the other's pages warm.
		copyFirst := rounds%2 == 0
		if copyFirst {
			drain()
		}
		sink.reset(n)
		start := time.Now()
		resBackfill(ctx, b, cfg, pool, model, agg.Name, 0)
		var last time.Time
		batches, last = sink.result()
		if got := sink.count(); got < n {
			b.Fatalf("the sink got %d documents, want %d", got, n)
		}
		builtTimes = append(builtTimes, last.Sub(start))
		statements += len(batches)
		if !copyFirst {
			drain()
		}
	}
	// Each figure is the median of its rounds: one slow round (a
	// checkpoint, a burst of other work) does not move it.
	built, drained := testenv.Median(builtTimes), testenv.Median(drainedTimes)
	mean := float64(n*rounds) / float64(statements)
	rounds = 1 // the rates below are of the median round
	total := float64(n * rounds)
	ours, theirs := total/built.Seconds(), total/drained.Seconds()
	b.ReportMetric(ours, "docs/s")
	b.ReportMetric(theirs, "copy-docs/s")
	b.ReportMetric(ours/theirs, "ratio")
	fmt.Printf("BENCH build aggregates=%d batch=%d mean_batch=%.0f workers=%d decant=%.0f docs/s (%.2fs) copy=%.0f docs/s (%.2fs) ratio=%.2f\n",
		n, batch, mean, workers, ours, built.Seconds()/float64(rounds), theirs, drained.Seconds()/float64(rounds), ours/theirs)
}

// recordingSink is a resolver.Sink that keeps the ids of every batch it is
// given and the time of the write that completed the expected count.
type recordingSink struct {
	mu      sync.Mutex
	want    int
	n       int
	batches [][]json.RawMessage
	last    time.Time
}

func (s *recordingSink) reset(want int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.want, s.n, s.batches, s.last = want, 0, nil, time.Time{}
}

// Write implements resolver.Sink.
func (s *recordingSink) Write(_ context.Context, docs []wire.Document) error {
	ids := make([]json.RawMessage, len(docs))
	for i := range docs {
		ids[i] = docs[i].ID
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, ids)
	s.n += len(docs)
	if s.n >= s.want && s.last.IsZero() {
		s.last = now
	}
	return nil
}

func (s *recordingSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// result returns the batches written and when the last expected document was.
func (s *recordingSink) result() ([][]json.RawMessage, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches, s.last
}

// buildCopyDrain runs agg's Build statement once per batch of aggregate
// keys ({"id":7}) as COPY (…) TO STDOUT into io.Discard, from workers
// connections at once, and returns the time taken and the rows drained.
// When agg has shared relations it also runs the build stage's way to the
// same documents — Batch, then each Shared statement for the objects the
// batch refers to (found before the clock starts) — and returns the
// faster of the two: the least PostgreSQL needs to build them.
func buildCopyDrain(ctx context.Context, dsn string, agg *mappings.Aggregate, batches [][]json.RawMessage, workers int) (time.Duration, int64, error) {
	d, err := buildCopyDrainCPU(ctx, dsn, agg, batches, workers)
	return d.took, d.rows, err
}

// copyDrained is what buildCopyDrainCPU measured of its faster drain.
type copyDrained struct {
	took time.Duration
	rows int64
	cpu  string  // every server's CPU and this process's over it: "kafka:…,pg:…,bench:…"
	sum  float64 // all of it, CPU-seconds
}

// buildCopyDrainCPU is buildCopyDrain with the CPU of the faster drain.
func buildCopyDrainCPU(ctx context.Context, dsn string, agg *mappings.Aggregate, batches [][]json.RawMessage, workers int) (copyDrained, error) {
	var fail copyDrained
	pool, err := resolver.NewPool(ctx, dsn, "decant-bench-copy", int32(workers))
	if err != nil {
		return fail, err
	}
	defer pool.Close()
	whole := make([][]string, len(batches))
	for i, keys := range batches {
		vals, err := copyKeyValues(agg, keys)
		if err != nil {
			return fail, err
		}
		s, err := copyStatement(agg.Build, vals)
		if err != nil {
			return fail, err
		}
		whole[i] = []string{s}
	}
	// measured runs one drain and reads the CPU over it.
	measured := func(stmts [][]string) (copyDrained, error) {
		cpu0, own0 := readServerCPU(), ownCPU()
		took, rows, err := copyDrain(ctx, pool, stmts, workers)
		servers, sum := readServerCPU().since(cpu0)
		own := ownCPU() - own0
		return copyDrained{took, rows, fmt.Sprintf("%s,bench:%.1f", servers, own), sum + own}, err
	}
	whole0, err := measured(whole)
	if err != nil || agg.Batch == nil {
		return whole0, err
	}
	split, err := batchCopyStatements(ctx, pool, agg, batches)
	if err != nil {
		return fail, err
	}
	split0, err := measured(split)
	if err != nil {
		return fail, err
	}
	if split0.rows != whole0.rows {
		return fail, fmt.Errorf("the batch statements built %d documents, Build %d", split0.rows, whole0.rows)
	}
	if split0.took < whole0.took {
		return split0, nil
	}
	return whole0, nil
}

// batchCopyStatements returns, per batch, COPY of agg's Batch statement
// then of each Shared statement with the values the batch's documents
// refer to, which it runs Batch to find.
func batchCopyStatements(ctx context.Context, pool *pgxpool.Pool, agg *mappings.Aggregate, batches [][]json.RawMessage) ([][]string, error) {
	out := make([][]string, len(batches))
	for i, keys := range batches {
		vals, err := copyKeyValues(agg, keys)
		if err != nil {
			return nil, err
		}
		s, err := copyStatement(agg.Batch, vals)
		if err != nil {
			return nil, err
		}
		out[i] = []string{s}
		args, err := agg.Batch.Args(vals)
		if err != nil {
			return nil, err
		}
		shared := agg.NewSharedSet()
		rows, err := pool.Query(ctx, agg.Batch.SQL, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			if _, err := shared.Add(rows.RawValues()[len(agg.ID)]); err != nil {
				rows.Close()
				return nil, err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for j, sh := range agg.Shared {
			if refs := shared.Keys(j); len(refs) > 0 {
				s, err := copyStatement(sh.Query, refs)
				if err != nil {
					return nil, err
				}
				out[i] = append(out[i], s)
			}
		}
	}
	return out, nil
}

// copyDrain runs each batch's statements (COPY … TO STDOUT) in order on
// one of workers connections into io.Discard, and returns the time taken
// and the rows the batches' first statements drained.
func copyDrain(ctx context.Context, pool *pgxpool.Pool, stmts [][]string, workers int) (time.Duration, int64, error) {
	// Open the connections before the clock starts, as the builder's are.
	var g errgroup.Group
	for range workers {
		g.Go(func() error {
			c, err := pool.Acquire(ctx)
			if err == nil {
				defer c.Release()
				_, err = c.Exec(ctx, "SELECT 1")
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	var (
		mu   sync.Mutex
		next int
		rows int64
	)
	start := time.Now()
	for range workers {
		g.Go(func() error {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer c.Release()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(stmts) {
					return nil
				}
				for j, stmt := range stmts[i] {
					tag, err := c.Conn().PgConn().CopyTo(ctx, io.Discard, stmt)
					if err != nil {
						return fmt.Errorf("COPY batch %d: %w", i, err)
					}
					if j == 0 {
						mu.Lock()
						rows += tag.RowsAffected()
						mu.Unlock()
					}
				}
			}
		})
	}
	err := g.Wait()
	return time.Since(start), rows, err
}

var sqlParam = regexp.MustCompile(`\$([0-9]+)`)

// copyKeyValues turns aggregate keys ({"id":7}) into agg's id values.
func copyKeyValues(agg *mappings.Aggregate, keys []json.RawMessage) ([][]json.RawMessage, error) {
	vals := make([][]json.RawMessage, len(keys))
	for i, key := range keys {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(key, &m); err != nil {
			return nil, fmt.Errorf("key %s: %w", key, err)
		}
		for _, c := range agg.ID {
			vals[i] = append(vals[i], m[c])
		}
	}
	return vals, nil
}

// copyStatement returns `COPY (<q.SQL>) TO STDOUT` with the parameters of
// vals written in as text[] literals.
func copyStatement(q *mappings.Query, vals [][]json.RawMessage) (string, error) {
	args, err := q.Args(vals)
	if err != nil {
		return "", err
	}
	lits := make([]string, len(args))
	for i, a := range args {
		var sb strings.Builder
		sb.WriteString("'{")
		for j, s := range a.([]*string) {
			if j > 0 {
				sb.WriteByte(',')
			}
			if s == nil {
				sb.WriteString("NULL")
				continue
			}
			// An array element in double quotes, then the whole literal in
			// single quotes: escape \ and " for the first, ' for the second.
			e := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(*s)
			sb.WriteString(`"` + strings.ReplaceAll(e, "'", "''") + `"`)
		}
		sb.WriteString("}'")
		lits[i] = sb.String()
	}
	sql := sqlParam.ReplaceAllStringFunc(q.SQL, func(p string) string {
		i, _ := strconv.Atoi(p[1:])
		if i < 1 || i > len(lits) {
			return p
		}
		return lits[i-1]
	})
	return "COPY (" + strings.TrimSuffix(strings.TrimSpace(sql), ";") + ") TO STDOUT", nil
}

// benchSeedCustomers fills resBenchSchema with n customers, n/10
// addresses and two orders per customer, and vacuums and analyzes the
// tables.
// benchCustomers seeds n customers (benchSeedCustomers) and returns the
// bound resBenchMapping with its indexes under indexPrefix, a pool on the
// database (closed at cleanup) and a warnings-only logger.
func benchCustomers(ctx context.Context, b *testing.B, pg *testenv.PG, n int, indexPrefix string) (*mappings.Model, *pgxpool.Pool, *slog.Logger) {
	benchSeedCustomers(b, pg, n)
	model := benchModel(b, pg, strings.ReplaceAll(resBenchMapping, "IDX_", indexPrefix+"_"))
	pool, err := resolver.NewPool(ctx, pg.DSN, "decant-bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return model, pool, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func benchSeedCustomers(tb testing.TB, pg *testenv.PG, n int) {
	tb.Helper()
	pg.Exec(tb, resBenchSchema)
	started := time.Now()
	pg.Exec(tb, fmt.Sprintf(`
INSERT INTO addresses SELECT g, 'city-' || g, lpad(g::text, 5, '0') FROM generate_series(1, %[2]d) g;
INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com', 1 + g %% %[2]d FROM generate_series(1, %[1]d) g;
INSERT INTO orders SELECT g, 1 + (g - 1) / 2, CASE WHEN g %% 3 = 0 THEN 'paid' ELSE 'new' END, (g %% 1000) + 0.5,
  timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, %[3]d) g;
`, n, max(1, n/10), 2*n))
	// Vacuumed and checkpointed now, so that autovacuum and the
	// checkpointer do not work on the new rows during a timed run.
	pg.Exec(tb, "VACUUM ANALYZE")
	pg.Exec(tb, "CHECKPOINT")
	tb.Logf("seeded %d customers, %d orders in %s", n, 2*n, time.Since(started).Round(time.Millisecond))
}

// benchModel loads one mapping file and binds it to pg's catalog.
func benchModel(tb testing.TB, pg *testenv.PG, mapping string) *mappings.Model {
	tb.Helper()
	model, err := bindMapping(testenv.Ctx(tb), pg.Pool, mapping)
	if err != nil {
		tb.Fatal(err)
	}
	return model
}

// benchEnvInt reads a positive integer from the environment.
func benchEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
