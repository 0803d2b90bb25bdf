package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
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
// documents straight into an index with the same mappings
// (idxDirectBulkLoad; reading the documents is not timed). It prints one
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
	cfg := resolver.Config{Kafka: kopts, TopicPrefix: k.Prefix, Logger: log}
	spec := indexer.SpecFor(agg, true)
	if _, err := indexer.EnsureIndex(ctx, es.Client, spec); err != nil {
		b.Fatal(err)
	}
	direct := spec
	direct.Alias = es.Prefix + "_direct"
	if _, err := indexer.EnsureIndex(ctx, es.Client, direct); err != nil {
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

	var pipeline, bulk time.Duration
	rounds := 0
	for b.Loop() {
		rounds++
		resWaitESQuiet(b, es)
		start := time.Now()
		bf := resBackfill(ctx, b, cfg, pool, model, agg.Name, 0)
		pipeline += time.Since(start)
		if bf.Count != int64(n) {
			b.Fatalf("backfill enqueued %d ids, want %d", bf.Count, n)
		}
		resWaitESQuiet(b, es)
		d, err := resBenchDirect(ctx, pool, es, agg, direct.Alias, n)
		if err != nil {
			b.Fatal(err)
		}
		bulk += d
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
	fmt.Printf("BENCH backfill aggregates=%d sinks=%s decant=%.0f docs/s (%.2fs) direct_bulk=%.0f docs/s (%.2fs) ratio=%.2f\n",
		n, sinks, ours, pipeline.Seconds()/float64(rounds), theirs, bulk.Seconds()/float64(rounds), ours/theirs)
}

// resBenchDirect builds the documents of ids 1..n with the aggregate's
// Build statement, 100000 at a time, and bulk-loads each chunk into index
// with idxDirectBulkLoad. Only the loads are timed.
func resBenchDirect(ctx context.Context, pool mappings.Querier, es *testenv.ESEnv, agg *mappings.Aggregate, index string, n int) (time.Duration, error) {
	const chunk = 100_000
	var took time.Duration
	for lo := 1; lo <= n; lo += chunk {
		hi := min(n, lo+chunk-1)
		docs := make([]wire.Document, 0, hi-lo+1)
		// Build takes at most a few thousand ids per statement well;
		// page through the chunk.
		for p := lo; p <= hi; p += 5000 {
			ids := make([][]json.RawMessage, 0, 5000)
			for id := p; id <= min(hi, p+4999); id++ {
				ids = append(ids, []json.RawMessage{json.RawMessage(strconv.Itoa(id))})
			}
			args, err := agg.Build.Args(ids)
			if err != nil {
				return 0, err
			}
			rows, err := pool.Query(ctx, agg.Build.SQL, args...)
			if err != nil {
				return 0, err
			}
			for rows.Next() {
				var id, doc []byte
				if err := rows.Scan(&id, &doc); err != nil {
					rows.Close()
					return 0, err
				}
				docs = append(docs, wire.Document{Aggregate: agg.Name, ID: json.RawMessage(`{"id":` + string(id) + `}`), Version: 1, Doc: wire.AppendCompact(nil, doc)})
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return 0, err
			}
		}
		if len(docs) != hi-lo+1 {
			return 0, fmt.Errorf("built %d documents of ids %d..%d, want %d", len(docs), lo, hi, hi-lo+1)
		}
		start := time.Now()
		if err := idxDirectBulkLoad(ctx, es, index, docs); err != nil {
			return 0, err
		}
		took += time.Since(start)
	}
	return took, nil
}

// resWaitESQuiet flushes Elasticsearch and waits until no merge runs, so
// that neither timed load pays for the background work the one before it
// left (merging a million freshly indexed documents takes minutes).
func resWaitESQuiet(tb testing.TB, es *testenv.ESEnv) {
	tb.Helper()
	ctx := testenv.Ctx(tb)
	res, err := esapi.IndicesFlushRequest{}.Do(ctx, es.Client)
	if err != nil {
		tb.Fatal(err)
	}
	res.Body.Close()
	testenv.WaitFor(tb, "Elasticsearch merges to finish", 10*time.Minute, func() (bool, error) {
		res, err := esapi.IndicesStatsRequest{Metric: []string{"merge"}, FilterPath: []string{"_all.total.merges.current"}}.Do(ctx, es.Client)
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
