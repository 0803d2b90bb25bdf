package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/testenv"
)

// idxSettings returns an index's flat settings (index.refresh_interval, …).
func idxSettings(t *testing.T, es *testenv.ESEnv, index string) map[string]any {
	t.Helper()
	code, body := es.Do(t, esapi.IndicesGetSettingsRequest{Index: []string{index}, FlatSettings: esapi.BoolPtr(true)})
	var r map[string]struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(body, &r); err != nil || code != 200 {
		t.Fatalf("GET %s/_settings: %d %s (%v)", index, code, body, err)
	}
	return r[index].Settings
}

// TestBulkLoadSettings (issue 14): an index created for a bulk load has
// refresh off and no replicas, says so to the next process that opens it,
// and FinishLoad gives it the mapping's own values back — on Elasticsearch
// and OpenSearch, for an initial load (EnsureLoadIndex) and a reindex
// (StartReindex … SwapAlias).
func TestBulkLoadSettings(t *testing.T) { forEachEngine(t, testBulkLoadSettings) }

func testBulkLoadSettings(t *testing.T, engine string) {
	es := testenv.SearchEngine(t, engine)
	ctx := testenv.Ctx(t)
	spec := indexer.IndexSpec{Aggregate: "article", Alias: es.Prefix + "-load",
		Settings: map[string]any{"number_of_shards": 1, "index": map[string]any{"refresh_interval": "2s"}},
		Mappings: map[string]any{"properties": map[string]any{"title": map[string]any{"type": "keyword"}}}}
	want := func(index, refresh, replicas string) {
		t.Helper()
		s := idxSettings(t, es, index)
		if got, _ := s["index.refresh_interval"].(string); got != refresh {
			t.Errorf("%s: index.refresh_interval = %q, want %q (%v)", index, got, refresh, s)
		}
		if got, _ := s["index.number_of_replicas"].(string); got != replicas {
			t.Errorf("%s: index.number_of_replicas = %q, want %q", index, got, replicas)
		}
	}
	loading := func(index string, want bool) {
		t.Helper()
		if got, err := indexer.Loading(ctx, es.Search, index); err != nil || got != want {
			t.Errorf("Loading(%s) = %v, %v; want %v", index, got, err, want)
		}
	}

	index, isLoading, err := indexer.EnsureLoadIndex(ctx, es.Search, spec)
	if err != nil || !isLoading || index != spec.IndexName() {
		t.Fatalf("EnsureLoadIndex = %q, %v, %v; want %s, loading", index, isLoading, err, spec.IndexName())
	}
	want(index, "-1", "0")
	// A process started before the load finished (a crash) resumes it.
	if again, isLoading, err := indexer.EnsureLoadIndex(ctx, es.Search, spec); err != nil || !isLoading || again != index {
		t.Errorf("EnsureLoadIndex again = %q, %v, %v; want %s, still loading", again, isLoading, err, index)
	}
	if got, err := indexer.EnsureIndex(ctx, es.Search, spec); err != nil || got != index {
		t.Errorf("EnsureIndex on a loading index = %q, %v; want %s (same mappings)", got, err, index)
	}
	if done, err := indexer.FinishLoad(ctx, es.Search, spec, index); err != nil || !done {
		t.Fatalf("FinishLoad = %v, %v; want a load finished", done, err)
	}
	want(index, "2s", "1") // the mapping's refresh interval; replicas back to the cluster default
	loading(index, false)
	if done, err := indexer.FinishLoad(ctx, es.Search, spec, index); err != nil || done {
		t.Errorf("FinishLoad again = %v, %v; want nothing to do", done, err)
	}
	if _, err := indexer.EnsureIndex(ctx, es.Search, spec); err != nil {
		t.Errorf("EnsureIndex after the load (the _meta kept its hash): %v", err)
	}

	// A reindex loads its new index the same way and finishes the load
	// before the swap.
	specB := spec
	specB.ZeroReplicas = true
	specB.Settings = map[string]any{"number_of_shards": 1}
	specB.Mappings = map[string]any{"properties": map[string]any{"title": map[string]any{"type": "text"}}}
	opts := indexer.ReindexOptions{Settle: 100 * time.Millisecond}
	next, err := indexer.StartReindex(ctx, es.Search, specB, opts)
	if err != nil {
		t.Fatal(err)
	}
	want(next, "-1", "0")
	loading(next, true)
	if err := indexer.SwapAlias(ctx, es.Search, specB, opts); err != nil {
		t.Fatal(err)
	}
	want(next, "", "0") // no refresh interval in the mapping: the default; ZeroReplicas: 0
	loading(next, false)
}

// cancelAfterSettings performs requests through Search and cancels a
// context once a PUT of an index's settings has been answered.
type cancelAfterSettings struct {
	indexer.Search
	cancel context.CancelFunc
}

func (c cancelAfterSettings) Perform(r *http.Request) (*http.Response, error) {
	res, err := c.Search.Perform(r)
	if err == nil && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/_settings") {
		c.cancel()
	}
	return res, err
}

// TestFinishLoadStoppedAfterSettings (issue 14): the settings FinishLoad
// gives back make the load's documents searchable, so a reader may stop
// decant right then. A stop at that moment (the context cancelled as the
// settings request is answered), or just before the finish (as every
// stage has passed the load), still finishes it: a graceful stop leaves
// no index with refresh off, or marked as loading, for the next process.
func TestFinishLoadStoppedAfterSettings(t *testing.T) {
	forEachEngine(t, testFinishLoadStoppedAfterSettings)
}

func testFinishLoadStoppedAfterSettings(t *testing.T, engine string) {
	es := testenv.SearchEngine(t, engine)
	spec := indexer.IndexSpec{Aggregate: "article", Alias: es.Prefix + "-stopped",
		Settings: map[string]any{"number_of_shards": 1, "refresh_interval": "3s"},
		Mappings: map[string]any{"properties": map[string]any{"title": map[string]any{"type": "keyword"}}}}
	for _, stop := range []string{"after the settings", "before the finish"} {
		t.Run(strings.ReplaceAll(stop, " ", "_"), func(t *testing.T) {
			spec := spec
			spec.Alias += "-" + strings.Fields(stop)[0]
			index, isLoading, err := indexer.EnsureLoadIndex(testenv.Ctx(t), es.Search, spec)
			if err != nil || !isLoading {
				t.Fatalf("EnsureLoadIndex = %q, %v, %v; want a loading index", index, isLoading, err)
			}
			ctx, cancel := context.WithCancel(testenv.Ctx(t))
			defer cancel()
			var search indexer.Search = cancelAfterSettings{es.Search, cancel}
			if stop == "before the finish" {
				cancel()
				search = es.Search
			}
			done, err := indexer.FinishLoad(ctx, search, spec, index)
			if ctx.Err() == nil {
				t.Fatal("the settings request was not seen: the test did not stop FinishLoad")
			}
			if err != nil || !done {
				t.Errorf("FinishLoad stopped %s = %v, %v; want the load finished", stop, done, err)
			}
			if s := idxSettings(t, es, index); s["index.refresh_interval"] != "3s" {
				t.Errorf("%s: index.refresh_interval = %v, want 3s", index, s["index.refresh_interval"])
			}
			if got, err := indexer.Loading(testenv.Ctx(t), es.Search, index); err != nil || got {
				t.Errorf("Loading(%s) after a stop %s = %v, %v; want the mark removed", index, stop, got, err)
			}
		})
	}
}
