package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// TestReindexSwapsWithoutFailedSearches (issue 5 acceptance 5): documents
// indexed under mapping A; the mapping changes to B; the reindex creates
// the new index, the sink writes to both while the "backfill" (here: the
// test writing every document again, as the build stage would) and live
// updates run, and the alias swaps atomically. A goroutine searching the
// alias all along never sees a failure nor a partial index, and after the
// swap searches use mapping B.
func TestReindexSwapsWithoutFailedSearches(t *testing.T) {
	forEachEngine(t, testReindexSwapsWithoutFailedSearches)
}

func testReindexSwapsWithoutFailedSearches(t *testing.T, engine string) {
	es, k := testenv.SearchEngine(t, engine), testenv.Kafka(t)
	ctx := testenv.Ctx(t)
	const n = 300
	specA := indexer.IndexSpec{Aggregate: "article", Alias: es.Prefix + "-article", ZeroReplicas: true,
		Settings: map[string]any{"number_of_shards": 1},
		Mappings: map[string]any{"properties": map[string]any{
			"title": map[string]any{"type": "keyword"}, // A: exact match only
			"rev":   map[string]any{"type": "long"},
		}}}
	specB := specA
	specB.Mappings = map[string]any{"properties": map[string]any{
		"title": map[string]any{"type": "text", "fields": map[string]any{"keyword": map[string]any{"type": "keyword"}}}, // B: full text
		"rev":   map[string]any{"type": "long"},
	}}
	s := idxESSink(t, es, k, specA)
	var version atomic.Uint64
	version.Store(100)
	docs := func(ids []int, rev int) []wire.Document {
		v := version.Add(1)
		out := make([]wire.Document, len(ids))
		for i, id := range ids {
			out[i] = idxDoc("article", fmt.Sprintf(`{"id":%d}`, id), v, fmt.Sprintf(`{"title":"Hello World %d","rev":%d}`, id, rev))
		}
		return out
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i + 1
	}
	idxWrite(t, s, docs(all, 0)...)
	if err := s.Refresh(ctx, "article"); err != nil {
		t.Fatal(err)
	}
	if got := idxCount(t, es, specA.Alias, `{"match":{"title":"hello"}}`); got != 0 {
		t.Fatalf("under mapping A (keyword) a full-text match found %d documents, want 0", got)
	}

	// Search the alias continuously; every search must succeed and see all n documents.
	searchCtx, stopSearch := context.WithCancel(ctx)
	var searches, failures atomic.Int64
	var firstFailure sync.Once
	var failure string
	var wg sync.WaitGroup
	wg.Go(func() {
		for searchCtx.Err() == nil {
			total, err := idxSearchTotal(searchCtx, es, specA.Alias)
			if searchCtx.Err() != nil {
				return
			}
			searches.Add(1)
			if err == nil && total != n {
				err = fmt.Errorf("search saw %d documents, want %d", total, n)
			}
			if err != nil {
				failures.Add(1)
				firstFailure.Do(func() { failure = err.Error() })
			}
		}
	})
	// Live updates keep coming during the reindex: they must reach both indexes.
	var stopUpdates atomic.Bool
	var lastRev atomic.Int64
	wg.Go(func() {
		for rev := 1; !stopUpdates.Load(); rev++ {
			if err := s.Write(ctx, docs([]int{1, 2, 3}, rev)); err != nil {
				t.Errorf("live update: %v", err)
				return
			}
			lastRev.Store(int64(rev))
			time.Sleep(20 * time.Millisecond)
		}
	})

	opts := indexer.ReindexOptions{Settle: 600 * time.Millisecond}
	err := indexer.Reindex(ctx, es.Search, specB, opts, func(ctx context.Context) error {
		// The build stage would rebuild every id with a fresh version; the
		// sink writes each to the old and the new index.
		for i := 0; i < n; i += 50 {
			if err := s.Write(ctx, docs(all[i:min(i+50, n)], 0)); err != nil {
				return err
			}
		}
		return s.Refresh(ctx, "article")
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // keep searching and updating after the swap
	stopUpdates.Store(true)
	stopSearch()
	wg.Wait()
	if failures.Load() > 0 {
		t.Errorf("%d of %d searches against the alias failed during the reindex; first: %s", failures.Load(), searches.Load(), failure)
	}
	t.Logf("%d searches during the reindex, %d live update rounds", searches.Load(), lastRev.Load())

	if err := s.Refresh(ctx, "article"); err != nil {
		t.Fatal(err)
	}
	if got := idxCount(t, es, specB.Alias, `{"match":{"title":"hello"}}`); got != n {
		t.Errorf("after the swap a full-text match found %d documents, want %d (mapping B in effect)", got, n)
	}
	for _, id := range []string{"1", "2", "3"} {
		if _, src, _ := idxGet(t, es, specB.Alias, id); int64(src["rev"].(float64)) != lastRev.Load() {
			t.Errorf("document %s has rev %v after the swap, want the last live update %d", id, src["rev"], lastRev.Load())
		}
	}
	code, body := es.Do(t, esapi.IndicesGetAliasRequest{Name: []string{specB.Alias, specB.NextAlias()}})
	if !strings.Contains(string(body), `"`+specB.IndexName()+`"`) || strings.Contains(string(body), `"`+specA.IndexName()+`"`) ||
		strings.Contains(string(body), `"`+specB.NextAlias()+`"`) {
		t.Errorf("aliases after the swap: %d %s; want only %s → %s", code, body, specB.Alias, specB.IndexName())
	}
	if code, _ := es.Do(t, esapi.IndicesExistsRequest{Index: []string{specA.IndexName()}}); code != 404 {
		t.Errorf("old index %s still exists (HEAD %d); KeepOld was false", specA.IndexName(), code)
	}
	if got, err := indexer.EnsureIndex(ctx, es.Search, specB); err != nil || got != specB.IndexName() {
		t.Errorf("EnsureIndex(B) after the swap = %q, %v", got, err)
	}
	if _, err := indexer.EnsureIndex(ctx, es.Search, specA); err == nil {
		t.Error("EnsureIndex(A) after the swap must report a mapping change")
	}
}

// TestReindexAbort: an abandoned reindex removes the marker and the new
// index; the alias and its documents are untouched.
func TestReindexAbort(t *testing.T) { forEachEngine(t, testReindexAbort) }

func testReindexAbort(t *testing.T, engine string) {
	es, k := testenv.SearchEngine(t, engine), testenv.Kafka(t)
	ctx := testenv.Ctx(t)
	specA := idxSpecStrict(es, "customer")
	specB := specA
	specB.Mappings = map[string]any{"properties": map[string]any{"name": map[string]any{"type": "keyword"}, "n": map[string]any{"type": "long"}}}
	s := idxESSink(t, es, k, specA)
	opts := indexer.ReindexOptions{Settle: 300 * time.Millisecond}
	if _, err := indexer.StartReindex(ctx, es.Search, specB, opts); err != nil {
		t.Fatal(err)
	}
	idxWrite(t, s, idxDoc("customer", `{"id":1}`, 10, `{"name":"both"}`))
	if _, _, found := idxGet(t, es, specB.IndexName(), "1"); !found {
		t.Error("during a reindex the sink did not write to the new index")
	}
	if err := indexer.AbortReindex(ctx, es.Search, specB, opts); err != nil {
		t.Fatal(err)
	}
	if code, _ := es.Do(t, esapi.IndicesExistsRequest{Index: []string{specB.IndexName()}}); code != 404 {
		t.Errorf("aborted reindex left index %s (HEAD %d)", specB.IndexName(), code)
	}
	idxWrite(t, s, idxDoc("customer", `{"id":2}`, 10, `{"name":"old only"}`))
	if _, _, found := idxGet(t, es, specA.Alias, "2"); !found {
		t.Error("write after the abort did not reach the alias")
	}
	if code, _ := es.Do(t, esapi.IndicesExistsRequest{Index: []string{specB.IndexName()}}); code != 404 {
		t.Errorf("a write after the abort re-created %s", specB.IndexName())
	}
}

func idxSearchTotal(ctx context.Context, es *testenv.ESEnv, alias string) (int, error) {
	tt := true
	res, err := esapi.SearchRequest{Index: []string{alias}, Body: strings.NewReader(`{"size":0,"query":{"match_all":{}}}`), TrackTotalHits: tt}.Do(ctx, es.Search)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return 0, fmt.Errorf("search %s: %d %s", alias, res.StatusCode, body)
	}
	var r struct {
		Shards struct{ Failed int } `json:"_shards"`
		Hits   struct {
			Total struct{ Value int } `json:"total"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, err
	}
	if r.Shards.Failed > 0 {
		return 0, fmt.Errorf("search %s: %d shards failed: %s", alias, r.Shards.Failed, body)
	}
	return r.Hits.Total.Value, nil
}

func idxCount(t *testing.T, es *testenv.ESEnv, alias, query string) int {
	t.Helper()
	code, body := es.Do(t, esapi.CountRequest{Index: []string{alias}, Body: strings.NewReader(`{"query":` + query + `}`)})
	if code != 200 {
		t.Fatalf("count %s: %d %s", alias, code, body)
	}
	var r struct{ Count int }
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Count
}
