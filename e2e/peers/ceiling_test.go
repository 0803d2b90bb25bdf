package peers

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// bulkCeiling is what Elasticsearch alone takes for the documents of one
// index on these cores: the best of a few direct bulk loads of them.
type bulkCeiling struct {
	docsPerSec float64
	cell       string
}

// directBulkCeiling loads every document of index (decant's, once its
// initial load and changes are done) into a fresh index with its mappings
// and shard count, set up for a bulk load as decant's first start sets up
// its own (refresh off, no replicas), once per cell of a small grid of
// request sizes × requests in flight, each timed up to the refresh that
// makes the documents searchable, and returns the fastest. Neither tool
// can make documents searchable faster than this: both also read
// PostgreSQL and build the documents on the same cores. The loads are
// testenv.BulkLoad's, as the e2e benchmarks' direct loads are (until the
// thirty-sixth pass of issue 14, esutil.BulkIndexer's, which left one of
// Elasticsearch's two write threads idle).
func directBulkCeiling(b *testing.B, es *testenv.ESEnv, index string) bulkCeiling {
	b.Helper()
	ctx := testenv.Ctx(b)
	hits, err := testenv.ESHits(ctx, es.URL, url.PathEscape(index), true)
	if err != nil {
		b.Fatal(err)
	}
	var def map[string]struct {
		Mappings map[string]any `json:"mappings"`
		Settings struct {
			Index struct {
				Shards string `json:"number_of_shards"`
			} `json:"index"`
		} `json:"settings"`
	}
	if _, err := testenv.ESRequest(ctx, http.MethodGet, es.URL+"/"+url.PathEscape(index), nil, &def); err != nil || len(def) != 1 {
		b.Fatalf("read %s's settings and mappings: %v (%d indexes)", index, err, len(def))
	}
	var mappings map[string]any
	shards := "1"
	for _, d := range def {
		mappings, shards = d.Mappings, d.Settings.Index.Shards
	}
	var best bulkCeiling
	for i, cell := range []struct{ mb, workers int }{{1, 2}, {5, 4}, {10, 8}} {
		dest := fmt.Sprintf("%s_direct_%d", es.Prefix, i)
		body := map[string]any{"mappings": mappings, "settings": map[string]any{"number_of_shards": shards, "number_of_replicas": 0, "refresh_interval": "-1"}}
		if code, err := testenv.ESRequest(ctx, http.MethodPut, es.URL+"/"+url.PathEscape(dest), body, nil); err != nil || code != http.StatusOK {
			b.Fatalf("create %s: %d %v", dest, code, err)
		}
		started := time.Now()
		err := testenv.BulkLoad(ctx, es.Search, dest, len(hits), func(i int) (testenv.BulkItem, error) {
			return testenv.BulkItem{ID: hits[i].ID, Source: hits[i].Source}, nil
		}, cell.mb<<20, cell.workers)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := testenv.ESRequest(ctx, http.MethodPost, es.URL+"/"+url.PathEscape(dest)+"/_refresh", nil, nil); err != nil {
			b.Fatal(err)
		}
		took := time.Since(started)
		if c, err := esCount(ctx, es.URL, dest); err != nil || c != len(hits) {
			b.Fatalf("%s holds %d documents (%v), want %d", dest, c, err, len(hits))
		}
		rate := float64(len(hits)) / took.Seconds()
		b.Logf("direct bulk load of %d documents, requests of %d MB × %d in flight: %s", len(hits), cell.mb, cell.workers, took.Round(time.Millisecond))
		if rate > best.docsPerSec {
			best = bulkCeiling{rate, fmt.Sprintf("%dMBx%d", cell.mb, cell.workers)}
		}
		if _, err := testenv.ESRequest(ctx, http.MethodDelete, es.URL+"/"+url.PathEscape(dest), nil, nil); err != nil {
			b.Fatal(err)
		}
	}
	return best
}
