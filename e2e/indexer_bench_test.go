package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// idxDirectBulkLoad is the baseline of the backfill benchmark (issue 5
// acceptance 7): the same documents loaded straight into an index — no
// versions, no dead-letter handling, as a plain loader would. It returns
// when every document is acknowledged.
func idxDirectBulkLoad(ctx context.Context, es *testenv.ESEnv, index string, docs []wire.Document) error {
	// As many requests in flight as the build stage's 4 workers have:
	// with fewer, Elasticsearch waited between requests and decant's sink
	// was faster than its "ceiling".
	return idxBulkLoad(ctx, es, index, docs, 5<<20, 4)
}

// idxBulkLoad is idxDirectBulkLoad with requests of flushBytes and
// workers requests in flight (the grid of the documents benchmarks).
func idxBulkLoad(ctx context.Context, es *testenv.ESEnv, index string, docs []wire.Document, flushBytes, workers int) error {
	return idxBulkLoadAs(ctx, es, index, docs, flushBytes, workers, 0)
}

// idxBulkLoadAs is idxBulkLoad; with a version above 0 it writes as
// decant's sink does: through an alias (require_alias), each document with
// version_type external_gte and version+i (indexer.encodeAction). The load
// is testenv.BulkLoad's: as lean as a client can be, so that it is a real
// ceiling.
func idxBulkLoadAs(ctx context.Context, es *testenv.ESEnv, index string, docs []wire.Document, flushBytes, workers int, version int64) error {
	return testenv.BulkLoad(ctx, es.Search, index, len(docs), func(i int) (testenv.BulkItem, error) {
		id, err := indexer.DocumentID(docs[i].ID)
		it := testenv.BulkItem{ID: id, Source: docs[i].Doc}
		if version > 0 {
			it.Version = version + int64(i)
		}
		return it, err
	}, flushBytes, workers)
}

// idxBenchDocs returns n documents shaped like the benchmark's aggregate:
// a root with two nested relations.
func idxBenchDocs(n int, version uint64) []wire.Document {
	docs := make([]wire.Document, n)
	for i := range docs {
		var b strings.Builder
		fmt.Fprintf(&b, `{"id":%d,"name":"customer %d","email":"c%d@example.com","orders":[`, i, i, i)
		for o := range 3 {
			if o > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"id":%d,"total":%d.50,"lines":[{"sku":"S-%d","qty":%d},{"sku":"S-%d","qty":1}]}`, i*10+o, o*7, o, o+1, o+5)
		}
		b.WriteString(`],"address":{"city":"Lyon","zip":"69001"}}`)
		docs[i] = idxDoc("bench", fmt.Sprintf(`{"id":%d}`, i), version, b.String())
	}
	return docs
}

// BenchmarkESSinkVsDirectBulk indexes the same documents through ESSink
// (versioned, in batches of 500 from 4 concurrent writers, like the build
// stage's workers) and straight in requests of 5 MB, 4 in flight
// (idxBulkLoad), and reports both rates and their ratio in a line
// starting with "BENCH index".
//
//	go test ./e2e -run '^$' -bench ESSinkVsDirectBulk -benchtime 1x -count 1
func BenchmarkESSinkVsDirectBulk(b *testing.B) { idxSinkVsDirectBulk(b, "elasticsearch") }

// BenchmarkOpenSearchSinkVsDirectBulk is BenchmarkESSinkVsDirectBulk on
// OpenSearch (issue 17): the same sink, the same documents, the same
// direct load; its line starts with "BENCH index opensearch".
func BenchmarkOpenSearchSinkVsDirectBulk(b *testing.B) { idxSinkVsDirectBulk(b, "opensearch") }

func idxSinkVsDirectBulk(b *testing.B, engine string) {
	es, k := testenv.SearchEngine(b, engine), testenv.Kafka(b)
	ctx := context.Background()
	const batch, writers = 500, 4
	n := benchEnvInt("DECANT_BENCH_INDEX_DOCS", 50000)
	docs := idxBenchDocs(n, 100)
	spec := indexer.IndexSpec{Aggregate: "bench", Alias: es.Prefix + "-bench", ZeroReplicas: true,
		Settings: map[string]any{"number_of_shards": 1}, Mappings: map[string]any{"properties": map[string]any{}}}
	if _, err := indexer.EnsureIndex(ctx, es.Search, spec); err != nil {
		b.Fatal(err)
	}
	direct := es.Prefix + "-direct"
	res, err := esapi.IndicesCreateRequest{Index: direct, Body: strings.NewReader(`{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)}.Do(ctx, es.Search)
	if err != nil {
		b.Fatal(err)
	}
	res.Body.Close()
	s, err := indexer.NewESSink(indexer.ESSinkConfig{Client: es.Search, Kind: es.Kind, Aliases: map[string]string{"bench": spec.Alias},
		Kafka: []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, TopicPrefix: k.Prefix, Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var sinkTimes, directTimes []time.Duration
	sink := func() {
		resWaitESQuiet(b, es)
		start := time.Now()
		var g errgroup.Group
		for w := range writers { // build workers, each owning some refs partitions
			g.Go(func() error {
				for j := w * batch; j < n; j += writers * batch {
					if err := s.Write(ctx, docs[j:min(j+batch, n)]); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		sinkTimes = append(sinkTimes, time.Since(start))
	}
	load := func() {
		resWaitESQuiet(b, es)
		start := time.Now()
		if err := idxDirectBulkLoad(ctx, es, direct, docs); err != nil {
			b.Fatal(err)
		}
		directTimes = append(directTimes, time.Since(start))
	}
	// Each round writes new versions of every document; which side goes
	// first alternates, each starts with Elasticsearch flushed and done
	// merging, and each figure is the median of its rounds.
	rounds := 0
	for ; b.Loop(); rounds++ {
		for j := range docs {
			docs[j].Version = uint64(100 + rounds)
		}
		if rounds%2 == 0 {
			sink()
			load()
		} else {
			load()
			sink()
		}
	}
	sinkTime, directTime := testenv.Median(sinkTimes), testenv.Median(directTimes)
	rounds = 1 // the rates below are of the median round
	sinkRate := float64(n*rounds) / sinkTime.Seconds()
	directRate := float64(n*rounds) / directTime.Seconds()
	b.ReportMetric(sinkRate, "sink-docs/s")
	b.ReportMetric(directRate, "direct-docs/s")
	b.ReportMetric(sinkRate/directRate, "ratio")
	name := "index"
	if engine != "elasticsearch" {
		name += " " + engine
	}
	fmt.Printf("BENCH %s docs=%d batch=%d writers=%d decant=%.0f docs/s (%.2fs) direct_bulk=%.0f docs/s (%.2fs) ratio=%.2f\n",
		name, n, batch, writers, sinkRate, sinkTime.Seconds()/float64(rounds), directRate, directTime.Seconds()/float64(rounds), sinkRate/directRate)
}
