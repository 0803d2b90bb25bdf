package binary

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestRunReindexesChangedMapping (issue 18): one of two aggregates' index
// mapping changes between two runs. With indexer.auto_reindex off decant
// refuses to start, naming the command to run; on (the default) `decant
// run` reindexes that aggregate by itself — a new concrete index filled
// through the build stage while the old one serves searches, then the
// alias swap — and leaves the other aggregate's index as it was. A search
// against the alias all along never fails nor sees fewer documents.
func TestRunReindexesChangedMapping(t *testing.T) {
	p := newPipeline(t)
	catAlias := p.ES.Prefix + "-category"
	p.Write("mappings/category.yaml", fmt.Sprintf(`version: 1
aggregates:
  category:
    table: categories
    elasticsearch:
      index: %s
      settings: {number_of_shards: 1, number_of_replicas: 0}
`, catAlias))
	const n = 300
	p.PG.Exec(t, fmt.Sprintf(`INSERT INTO items SELECT g, 'item ' || g, 1 + g %% 2 FROM generate_series(1, %d) g`, n))
	run := p.Start("run-1", nil, "run")
	p.WaitConverged(90 * time.Second)
	waitLog(t, run, `msg="initial load complete`, time.Minute)
	itemIndex, catIndex := aliasIndex(t, p, p.Alias), aliasIndex(t, p, catAlias)
	run.Term(60 * time.Second)

	// The item index's mapping changes: name becomes a keyword.
	changed := strings.Replace(fmt.Sprintf(items.Mapping, p.Alias), "      settings: {number_of_shards: 1, number_of_replicas: 0}\n",
		"      settings: {number_of_shards: 1, number_of_replicas: 0}\n      mappings: {properties: {name: {type: keyword}}}\n", 1)
	if changed == fmt.Sprintf(items.Mapping, p.Alias) {
		t.Fatal("the mapping did not change: the test's edit no longer applies")
	}
	p.Write("mappings/item.yaml", changed)

	refused := testenv.DecantCmd(t, []string{"DECANT_INDEXER_AUTO_REINDEX=false"}, "run", "--config", p.Config)
	out, err := refused.CombinedOutput()
	if err == nil {
		t.Fatalf("decant run with auto_reindex off and a changed mapping started:\n%s", out)
	}
	if !strings.Contains(string(out), "decant backfill item --reindex") {
		t.Fatalf("decant run with auto_reindex off: exit %d, want a message naming `decant backfill item --reindex`:\n%s", refused.ProcessState.ExitCode(), out)
	}

	// Search the alias all along.
	stop := make(chan struct{})
	var searches, failures atomic.Int64
	var first sync.Once
	var failure string
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			code, body, err := testenv.Get(p.ES.URL + "/" + p.Alias + "/_search?size=0&track_total_hits=true")
			searches.Add(1)
			var r struct {
				Hits struct {
					Total struct{ Value int }
				}
			}
			if err == nil && code == 200 {
				err = json.Unmarshal([]byte(body), &r)
			}
			if err != nil || code != 200 || r.Hits.Total.Value != n {
				failures.Add(1)
				first.Do(func() { failure = fmt.Sprintf("%d %.200s %v", code, body, err) })
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	run = p.Start("run-2", nil, "run")
	waitLog(t, run, `msg="the mapping of the aggregate changed: reindexing it[^\n]*aggregate=item`, time.Minute)
	waitLog(t, run, `msg="reindex finished: the alias points at the index of the current mappings"[^\n]*aggregate=item`, 3*time.Minute)
	close(stop)
	wg.Wait()
	if failures.Load() > 0 {
		t.Errorf("%d of %d searches of %s during the reindex failed or saw fewer than %d documents; first: %s", failures.Load(), searches.Load(), p.Alias, n, failure)
	}
	t.Logf("%d searches during the reindex, none failed", searches.Load())
	if got := aliasIndex(t, p, p.Alias); got == itemIndex {
		t.Errorf("the item alias still points at %s after the reindex", got)
	}
	if got := aliasIndex(t, p, catAlias); got != catIndex {
		t.Errorf("the category alias moved from %s to %s: its mapping did not change", catIndex, got)
	}
	if regexp.MustCompile(`reindexing it[^\n]*aggregate=category`).MatchString(run.Output()) {
		t.Errorf("run-2 reindexed the category aggregate too")
	}
	code2, body, _ := testenv.Get(p.ES.URL + "/" + p.Alias + "/_mapping")
	if code2 != 200 || !strings.Contains(body, `"name":{"type":"keyword"}`) {
		t.Errorf("the item index's mapping after the reindex: %d %s, want name as a keyword", code2, body)
	}
	p.PG.Exec(t, `UPDATE items SET name = 'after the reindex' WHERE id = 1`)
	p.WaitConverged(90 * time.Second)
	run.Term(60 * time.Second)
}

// aliasIndex is the index an alias points at.
func aliasIndex(t *testing.T, p *testenv.Pipeline, alias string) string {
	t.Helper()
	code, body, err := testenv.Get(p.ES.URL + "/_alias/" + alias)
	var r map[string]any
	if err == nil {
		err = json.Unmarshal([]byte(body), &r)
	}
	if err != nil || code != 200 || len(r) != 1 {
		t.Fatalf("GET _alias/%s: %d %s (%v)", alias, code, body, err)
	}
	for index := range r {
		return index
	}
	return ""
}

// TestRunReindexesChangedFilter (issue 18): an aggregate's where: filter
// changes between two runs, its index body does not. The index hash covers
// the filter, so decant run reindexes the aggregate by itself: the
// documents the new filter drops are gone and those it adds are there,
// without any write to the table.
func TestRunReindexesChangedFilter(t *testing.T) {
	filtered := func(where string) testenv.PipelineSpec {
		s := items
		// (the mapping is a format string: % is written %%)
		s.Mapping = strings.Replace(items.Mapping, "    table: items\n", "    table: items\n    where: \""+strings.ReplaceAll(where, "%", "%%")+"\"\n", 1)
		s.OracleSQL = items.OracleSQL + " WHERE " + strings.ReplaceAll(where, "id", "i.id")
		return s
	}
	even := filtered("id % 2 = 0")
	p := testenv.NewPipeline(t, even)
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'item ' || g, 1 + g % 2 FROM generate_series(1, 60) g`)
	run := p.Start("run-1", nil, "run")
	p.WaitConverged(90 * time.Second)
	before := aliasIndex(t, p, p.Alias)
	run.Term(60 * time.Second)

	thirds := filtered("id % 3 = 0")
	p.Write("mappings/item.yaml", fmt.Sprintf(thirds.Mapping, p.Alias))
	p.Docs.OracleSQL = thirds.OracleSQL
	run = p.Start("run-2", nil, "run")
	waitLog(t, run, "reindexing it into a new index", time.Minute)
	p.WaitConverged(2 * time.Minute)
	if after := aliasIndex(t, p, p.Alias); after == before {
		t.Fatalf("the alias still points at %s after the filter changed", before)
	}
	run.Term(60 * time.Second)
}
