package testenv

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestBulkLoad loads documents in several runs from several goroutines and
// finds every one of them; through an alias with versions, an older
// version than the index holds is refused, and so is a document
// Elasticsearch cannot parse: a ceiling that dropped documents would be
// no ceiling.
func TestBulkLoad(t *testing.T) {
	es := Elasticsearch(t)
	ctx := Ctx(t)
	index := es.Prefix + "-bulkload"
	alias := index + "-alias"
	body := map[string]any{"aliases": map[string]any{alias: map[string]any{}}}
	if code, err := ESRequest(ctx, http.MethodPut, es.URL+"/"+url.PathEscape(index), body, nil); err != nil || code != http.StatusOK {
		t.Fatalf("create %s: %d %v", index, code, err)
	}
	t.Cleanup(func() { ESRequest(ctx, http.MethodDelete, es.URL+"/"+url.PathEscape(index), nil, nil) }) //nolint:errcheck // best effort
	const n = 1200
	item := func(version int64) func(int) (BulkItem, error) {
		return func(i int) (BulkItem, error) {
			id := fmt.Sprintf("doc \"%d\"", i) // a quote: the _id is escaped
			return BulkItem{ID: id, Source: fmt.Appendf(nil, `{"n":%d,"v":%d}`, i, version), Version: version}, nil
		}
	}
	// Runs of about 10 kB: about 40 requests from 3 goroutines.
	if err := BulkLoad(ctx, es.Search, index, n, item(0), 10<<10, 3); err != nil {
		t.Fatal(err)
	}
	if err := BulkLoad(ctx, es.Search, alias, n, item(5), 10<<10, 3); err != nil {
		t.Fatal(err)
	}
	hits, err := ESHits(ctx, es.URL, index, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != n {
		t.Fatalf("%s holds %d documents, want %d", index, len(hits), n)
	}
	for _, h := range hits {
		if h.Version != 5 || !strings.Contains(string(h.Source), `"v":5`) || !strings.HasPrefix(h.ID, `doc "`) {
			t.Fatalf("document %q: version %d, source %s; want version 5 and its version-5 source", h.ID, h.Version, h.Source)
		}
	}
	if err := BulkLoad(ctx, es.Search, alias, n, item(3), 10<<10, 3); err == nil || !strings.Contains(err.Error(), "version_conflict") {
		t.Errorf("loading version 3 over version 5: err = %v, want a version conflict", err)
	}
	bad := func(int) (BulkItem, error) { return BulkItem{ID: "bad", Source: []byte(`{"n":`)}, nil }
	if err := BulkLoad(ctx, es.Search, index, 1, bad, 10<<10, 1); err == nil {
		t.Error("loading a document Elasticsearch cannot parse: no error")
	}
}
