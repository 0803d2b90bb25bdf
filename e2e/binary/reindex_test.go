package binary

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestBackfillReindexWithBuild: after a mapping change, `decant backfill
// <agg> --reindex --build` builds a new index (while `decant run` keeps
// writing), swaps the alias, and the alias then has the new mapping and
// every document (regression: --build used to refuse the changed mapping).
func TestBackfillReindexWithBuild(t *testing.T) {
	p := newPipeline(t)
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'item ' || g, 1 + g % 2 FROM generate_series(1, 300) g`)
	run := p.Start("run", nil, "run")
	p.WaitConverged(2 * time.Minute)
	_, before, _ := testenv.Get(p.ES.URL + "/" + p.Alias + "/_alias")
	mappingFile := p.Mapping
	m, err := os.ReadFile(mappingFile)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(m), "settings: {number_of_shards: 1, number_of_replicas: 0}",
		"settings: {number_of_shards: 1, number_of_replicas: 0}\n      mappings: {properties: {name: {type: keyword}}}", 1)
	if changed == string(m) {
		t.Fatal("mapping edit did not apply")
	}
	testenv.WriteFile(t, p.Mapping, changed)
	out, err := p.Decant("backfill", "item", "--reindex", "--build")
	if err != nil || !strings.Contains(out, "reindexed item") {
		t.Fatalf("decant backfill --reindex --build: %v\n%s", err, out)
	}
	code, body, _ := testenv.Get(p.ES.URL + "/" + p.Alias + "/_mapping")
	if code != 200 || !strings.Contains(body, `"name":{"type":"keyword"}`) {
		t.Fatalf("after the swap the alias's mapping is not the new one: %d %s", code, body)
	}
	_, after, _ := testenv.Get(p.ES.URL + "/" + p.Alias + "/_alias")
	if before == after {
		t.Fatalf("alias still points at the old index: %s", after)
	}
	p.PG.Exec(t, `UPDATE items SET name = 'renamed' WHERE id = 7`)
	p.WaitConverged(2 * time.Minute)
	if code := run.Term(time.Minute); code != 0 {
		t.Fatalf("decant run exit %d", code)
	}
}
