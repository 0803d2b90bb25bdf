package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/wire"
)

// resFanSchema: order lines are the roots, each with its product as a
// many-to-one relation; one product is on every line but a few.
const resFanSchema = `
CREATE TABLE products (id int PRIMARY KEY, sku text NOT NULL, title text);
CREATE TABLE lines (id int PRIMARY KEY, product_id int REFERENCES products(id), qty int, note text);
CREATE INDEX ON lines (product_id);
ALTER TABLE products REPLICA IDENTITY FULL;
ALTER TABLE lines REPLICA IDENTITY FULL;
`

const resFanMapping = `version: 1
aggregates:
  line:
    table: lines
    elasticsearch: {index: IDX_line}
    relations:
      product: {table: products, references: product_id, columns: [id, sku, title]}
`

// resFanOthers lines point at another product and must keep its title.
const resFanOthers = 100

// TestResolverFanOut is issue 5's acceptance 4: one UPDATE of a product
// that N order lines (the aggregate roots) reference rebuilds all N
// documents, in both sinks, with bounded memory. The map and build stages
// run as child processes; their peak RSS (VmHWM) is read while they are
// alive, once for the initial load (the streamer's snapshot of every row)
// and once, in fresh processes, for the fan-out alone. Both must stay under
// 300 MB.
//
// N is 20000 by default, 200000 with DECANT_HEAVY=1 (make test-heavy),
// or DECANT_FANOUT_AGGREGATES.
func TestResolverFanOut(t *testing.T) {
	n := resSize("DECANT_FANOUT_AGGREGATES", 20000, 200000)
	const maxRSS = 300 << 20
	e := newResEnv(t, resFanSchema, resFanMapping)
	e.pg.Exec(t, fmt.Sprintf(`
INSERT INTO products VALUES (1, 'sku-1', 'old title'), (2, 'sku-2', 'other title');
INSERT INTO lines SELECT g, 1, 1 + g %% 7, 'line ' || g FROM generate_series(1, %d) g;
INSERT INTO lines SELECT %d + g, 2, 1, 'other' FROM generate_series(1, %d) g;
ANALYZE;`, n, n, resFanOthers))
	total := n + resFanOthers

	// Initial load: the streamer snapshots every row; the map stage turns
	// the snapshot into a rebuild of every line.
	e.startStreamer()
	mapper, err := e.startChild("map", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	builder, err := e.startChild("build", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	// waitQuiet alone does not wait for a snapshot (the slot starts past
	// it): wait for every row in the raw topics first.
	raw, _ := e.topics()
	ctx := testenv.Ctx(t)
	testenv.WaitFor(t, "the snapshot of every row in the raw topics", resFanTimeout(n), func() (bool, error) {
		ends, err := e.k.Admin.ListEndOffsets(ctx, raw...)
		if err != nil {
			return false, err
		}
		var got int64
		ends.Each(func(o kadm.ListedOffset) { got += max(0, o.Offset) })
		return got >= int64(total+2), fmt.Errorf("%d of %d rows", got, total+2)
	})
	e.waitQuiet(resFanTimeout(n))
	t.Logf("initial load of %d documents: %s", total, time.Since(started).Round(time.Millisecond))
	if got := e.esCount(t, "line", nil); got != total {
		t.Fatalf("after the initial load Elasticsearch has %d line documents, want %d", got, total)
	}
	loadMap, loadBuild := resPeak(t, mapper), resPeak(t, builder)
	for _, c := range []*testenv.Proc{mapper, builder} {
		if err := resTerm(c); err != nil {
			t.Fatalf("%s: %v\n%s", c.Name, err, c.Tail(20))
		}
	}

	// The fan-out, in fresh processes: their peak RSS is the fan-out's.
	if mapper, err = e.startChild("map", 2, ""); err != nil {
		t.Fatal(err)
	}
	if builder, err = e.startChild("build", 2, ""); err != nil {
		t.Fatal(err)
	}
	title := "new title " + testenv.Suffix()
	started = time.Now()
	e.pg.Exec(t, `UPDATE products SET title = $1 WHERE id = 1`, title)
	e.waitQuiet(resFanTimeout(n))
	took := time.Since(started)
	fanMap, fanBuild := resPeak(t, mapper), resPeak(t, builder)
	for _, c := range []*testenv.Proc{mapper, builder} {
		if c.Exited() {
			t.Fatalf("%s exited: %v\n%s", c.Name, c.Err(), c.Tail(30))
		}
	}
	t.Logf("fan-out to %d documents: %s (%.0f docs/s)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	t.Logf("peak RSS (VmHWM): initial load map %d MB, build %d MB; fan-out map %d MB, build %d MB",
		loadMap>>20, loadBuild>>20, fanMap>>20, fanBuild>>20)

	var problems []string
	for name, rss := range map[string]int64{"map (initial load)": loadMap, "build (initial load)": loadBuild, "map (fan-out)": fanMap, "build (fan-out)": fanBuild} {
		if rss > maxRSS {
			problems = append(problems, fmt.Sprintf("%s: peak RSS %d MB, want < %d MB", name, rss>>20, maxRSS>>20))
		}
	}
	// Elasticsearch: every line of product 1 carries the new title, the
	// others the old one.
	if got := e.esCount(t, "line", map[string]any{"term": map[string]any{"product.title.keyword": title}}); got != n {
		problems = append(problems, fmt.Sprintf("elasticsearch: %d documents carry the new title, want %d", got, n))
	}
	if got := e.esCount(t, "line", map[string]any{"term": map[string]any{"product.title.keyword": "other title"}}); got != resFanOthers {
		problems = append(problems, fmt.Sprintf("elasticsearch: %d documents carry product 2's title, want %d", got, resFanOthers))
	}
	if got := e.esCount(t, "line", nil); got != total {
		problems = append(problems, fmt.Sprintf("elasticsearch: %d line documents, want %d", got, total))
	}
	// Aggregate topic: the last document of every key.
	state, vp := e.aggTopicState("line")
	problems = append(problems, vp...)
	if len(state) != total {
		problems = append(problems, fmt.Sprintf("aggregate topic: %d documents, want %d", len(state), total))
	}
	stale := 0
	for k, d := range state {
		var doc struct {
			ProductID int `json:"product_id"`
			Product   struct {
				Title string `json:"title"`
			} `json:"product"`
		}
		if err := json.Unmarshal(d, &doc); err != nil {
			problems = append(problems, fmt.Sprintf("aggregate topic: %s: %v", k, err))
			continue
		}
		want := "other title"
		if doc.ProductID == 1 {
			want = title
		}
		if doc.Product.Title != want {
			if stale++; stale <= 10 {
				problems = append(problems, fmt.Sprintf("aggregate topic: %s has product title %q, want %q", k, doc.Product.Title, want))
			}
		}
	}
	if stale > 10 {
		problems = append(problems, fmt.Sprintf("aggregate topic: … %d documents with a stale title in all", stale))
	}
	resReport(t, problems)
}

// resFanTimeout allows about 200 documents a second on a loaded machine.
func resFanTimeout(n int) time.Duration {
	return max(3*time.Minute, time.Duration(n/200)*time.Second)
}

// resPeak reads a live child's peak RSS.
func resPeak(t *testing.T, c *testenv.Proc) int64 {
	t.Helper()
	if c.Exited() {
		t.Fatalf("%s exited: %v\n%s", c.Name, c.Err(), c.Tail(30))
	}
	rss, err := c.PeakRSS()
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	return rss
}

// esCount counts the documents of an aggregate's alias that match query
// (all when nil), after a refresh.
func (e *resEnv) esCount(t *testing.T, aggregate string, query map[string]any) int {
	t.Helper()
	ctx := testenv.Ctx(t)
	if err := e.search.Refresh(ctx, aggregate); err != nil {
		t.Fatal(err)
	}
	c := e.es.Client.Count
	opts := []func(*esapi.CountRequest){c.WithContext(ctx), c.WithIndex(e.model.Aggregate(aggregate).Index)}
	if query != nil {
		b, _ := json.Marshal(map[string]any{"query": query})
		opts = append(opts, c.WithBody(strings.NewReader(string(b))))
	}
	res, err := c(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.IsError() {
		t.Fatalf("count %s: %s", aggregate, raw)
	}
	var cr struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(raw, &cr); err != nil {
		t.Fatal(err)
	}
	return cr.Count
}

// TestResolverBackfillPaginates is a regression test: the keyset
// pagination of root ids (Backfill, and the rebuilds after a TRUNCATE or
// an initial snapshot) ordered by the text of the id — the output column
// "id"::text shadowed the table column in ORDER BY — while it compared
// the typed id, so every page past the first skipped ids: 20100 rows gave
// 11101 refs. It checks that every id, single and composite, is enqueued
// exactly once across many pages.
//
// It also runs Backfill on refs topics that do not exist yet (no stage
// runs), a second regression: Backfill created the topic, then listed its
// offsets before the broker knew it and failed with
// UNKNOWN_TOPIC_OR_PARTITION (first-start backfills, `decant backfill` on
// a fresh cluster).
func TestResolverBackfillPaginates(t *testing.T) {
	e := newResEnv(t, `
CREATE TABLE items (id int PRIMARY KEY, name text);
CREATE TABLE cells (region text, n int, v text, PRIMARY KEY (region, n));
INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 1234) g;
INSERT INTO cells SELECT 'r' || r, n, 'v' FROM generate_series(1, 12) r, generate_series(1, 25) n;`, `version: 1
aggregates:
  item: {table: items, elasticsearch: {index: IDX_item}}
  cell: {table: cells, elasticsearch: {index: IDX_cell}}
`)
	ctx := testenv.Ctx(t)
	for _, x := range []struct {
		agg  string
		rows int
	}{{"item", 1234}, {"cell", 300}} {
		bf, err := resolver.Backfill(ctx, e.cfg, e.pool, e.model, x.agg, resolver.BackfillOptions{PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		keys := e.topicKeys(t, wire.RefsTopic(e.k.Prefix, x.agg))
		distinct := map[string]bool{}
		for _, k := range keys {
			distinct[k] = true
		}
		if bf.Count != int64(x.rows) || len(keys) != x.rows || len(distinct) != x.rows {
			t.Errorf("%s: backfill counted %d ids, produced %d refs of %d distinct ids; want %d of each", x.agg, bf.Count, len(keys), len(distinct), x.rows)
		}
	}
}

// topicKeys reads the key of every record of topic.
func (e *resEnv) topicKeys(t *testing.T, topic string) []string {
	t.Helper()
	var keys []string
	for _, r := range e.k.Records(t, topic) {
		keys = append(keys, string(r.Key))
	}
	return keys
}
