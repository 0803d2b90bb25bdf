package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/elastic/go-elasticsearch/v8/esutil"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// BenchmarkBulkShape asks what about a bulk load's shape makes
// Elasticsearch faster at replacing documents: the live backlog's grid
// had one cell (10 MB × 8 in flight, which holds every document in the
// client until the end and then sends them all at once) up to a fifth
// faster than every other, with more indexing time summed over fewer
// seconds (docs/performance.md, "Thirty-sixth pass"). It loads the same
// DECANT_BENCH_SHAPE_DOCS documents (default 40,000) of the shop's
// aggregate into clones of an index holding DECANT_BENCH_DOCS_CUSTOMERS
// (default 100,000), once per shape, twice, in alternating order, and logs
// each load's time, CPU and Elasticsearch's work.
//
//	go test ./e2e -run '^$' -bench '^BenchmarkBulkShape$' -benchtime 1x
func BenchmarkBulkShape(b *testing.B) {
	d := docsSetup(b, benchEnvInt("DECANT_BENCH_DOCS_CUSTOMERS", 100000))
	ctx := testenv.Ctx(b)
	pool := freshPool(ctx, b, d.pg.DSN)
	defer pool.Close()
	all, err := resBenchDocs(ctx, pool, d.agg, d.n)
	if err != nil {
		b.Fatal(err)
	}
	d.warmDocs = all[:min(len(all), docsWarmDocs)]
	d.warmUp(b, true)
	index := d.freshIndex(b, d.alias, false)
	if err := idxBulkLoad(ctx, d.es, index, all, 10<<20, 4); err != nil {
		b.Fatal(err)
	}
	docsRefresh(b, d.es, index)
	copyAlias := d.es.Prefix + "-shape-copy"
	frozen := d.frozenCopy(b, d.alias, copyAlias+"-frozen")
	d.deleteIndex(b, index)
	docs := all[:min(len(all), benchEnvInt("DECANT_BENCH_SHAPE_DOCS", 40000))]

	type shape struct {
		name string
		load func(index string) error
	}
	// pre splits docs into n requests (interleaved: document i in request
	// i mod n; else contiguous runs), builds every body first, then sends
	// them inFlight at a time.
	pre := func(n, inFlight int, interleaved bool) func(string) error {
		return func(index string) error {
			bodies := make([][]byte, n)
			for i, doc := range docs {
				r := i * n / len(docs)
				if interleaved {
					r = i % n
				}
				id, err := indexer.DocumentID(doc.ID)
				if err != nil {
					return err
				}
				bodies[r] = fmt.Appendf(bodies[r], `{"index":{"_id":%q}}`+"\n", id)
				bodies[r] = append(append(bodies[r], doc.Doc...), '\n')
			}
			return shapeSend(ctx, d.es, index, bodies, inFlight)
		}
	}
	esutilLoad := func(mb, w int) func(string) error {
		return func(index string) error { return shapeESUtil(ctx, d.es, index, docs, mb<<20, w) }
	}
	grid := func(mb, w int) func(string) error {
		return func(index string) error { return idxBulkLoad(ctx, d.es, index, docs, mb<<20, w) }
	}
	shapes := []shape{
		{"esutil 1MBx4", esutilLoad(1, 4)},
		{"esutil 5MBx4", esutilLoad(5, 4)},
		{"esutil 10MBx8", esutilLoad(10, 8)},
		{"idxBulkLoad 1MBx4", grid(1, 4)},
		{"idxBulkLoad 5MBx4", grid(5, 4)},
		{"idxBulkLoad 5MBx8", grid(5, 8)},
		{"idxBulkLoad 10MBx8", grid(10, 8)},
		{"8 interleaved, all at once", pre(8, 8, true)},
		{"16 contiguous, all at once", pre(16, 16, false)},
		{"32 contiguous, 4 at a time", pre(32, 4, false)},
		{"2 contiguous, all at once", pre(2, 2, false)},
	}
	clones := 0
	for b.Loop() {
		for round := range 2 {
			order := slices.Clone(shapes)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, s := range order {
				clones++
				l, writes, err := d.timedLoadInto(b, d.cloneOf(b, frozen, copyAlias, clones), s.load)
				if err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				fmt.Printf("SHAPE %-28s %.2fs (writes %.2fs): CPU %s, JIT %s, %s\n", s.name, l.took.Seconds(), writes.Seconds(), l.cpu, cmp.Or(l.jit, "none"), l.es)
			}
		}
	}
	d.deleteIndex(b, frozen)
}

// shapeESUtil is how the documents benchmarks loaded their ceilings until
// the thirty-sixth pass: esutil.BulkIndexer with workers workers flushing
// at flushBytes, every item's answer decoded.
func shapeESUtil(ctx context.Context, es *testenv.ESEnv, index string, docs []wire.Document, flushBytes, workers int) error {
	bi, err := esutil.NewBulkIndexer(esutil.BulkIndexerConfig{Client: testenv.RetryRejected(es.Search), Index: index, FlushBytes: flushBytes, NumWorkers: workers})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var failed error
	for i := range docs {
		id, err := indexer.DocumentID(docs[i].ID)
		if err != nil {
			return err
		}
		item := esutil.BulkIndexerItem{Action: "index", DocumentID: id, Body: bytes.NewReader(docs[i].Doc)}
		item.OnFailure = func(_ context.Context, _ esutil.BulkIndexerItem, res esutil.BulkIndexerResponseItem, err error) {
			mu.Lock()
			defer mu.Unlock()
			failed = cmp.Or(failed, fmt.Errorf("esutil load: %d %s %v", res.Status, res.Error.Reason, err))
		}
		if err := bi.Add(ctx, item); err != nil {
			return err
		}
	}
	if err := bi.Close(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return failed
}

// shapeSend sends each body as one _bulk request into index, inFlight at a
// time, and fails on any item's error.
func shapeSend(ctx context.Context, es *testenv.ESEnv, index string, bodies [][]byte, inFlight int) error {
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for _, body := range bodies {
		if len(body) == 0 {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			code, resp, err := shapeBulk(ctx, es, index, body)
			if err == nil && (code != http.StatusOK || bytes.Contains(resp, []byte(`"errors":true`))) {
				err = fmt.Errorf("bulk: %d %.300s", code, resp)
			}
			if err != nil {
				mu.Lock()
				failed = cmp.Or(failed, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

func shapeBulk(ctx context.Context, es *testenv.ESEnv, index string, body []byte) (int, []byte, error) {
	res, err := esapi.BulkRequest{Index: index, Body: bytes.NewReader(body), FilterPath: []string{"errors", "items.*.error"}}.Do(ctx, testenv.RetryRejected(es.Search))
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(res.Body); err != nil {
		return 0, nil, err
	}
	return res.StatusCode, buf.Bytes(), nil
}
