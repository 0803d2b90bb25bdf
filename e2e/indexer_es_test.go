package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// forEachEngine runs test once per search engine, as subtests named
// after it: Elasticsearch and OpenSearch (issue 17).
func forEachEngine(t *testing.T, test func(t *testing.T, engine string)) {
	for _, engine := range []string{"elasticsearch", "opensearch"} {
		t.Run(engine, func(t *testing.T) { test(t, engine) })
	}
}

// idxGet returns a document's _version and _source, or found=false.
func idxGet(t *testing.T, es *testenv.ESEnv, index, id string) (version int64, source map[string]any, found bool) {
	t.Helper()
	code, body := es.Do(t, esapi.GetRequest{Index: index, DocumentID: id})
	if code == http.StatusNotFound {
		return 0, nil, false
	}
	if code != http.StatusOK {
		t.Fatalf("GET %s/%s: %d %s", index, id, code, body)
	}
	var r struct {
		Version int64          `json:"_version"`
		Source  map[string]any `json:"_source"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.Version, r.Source, true
}

// idxSpecStrict is a strict mapping: unknown fields and wrong types are refused.
func idxSpecStrict(es *testenv.ESEnv, name string) indexer.IndexSpec {
	return indexer.IndexSpec{Aggregate: name, Alias: es.Prefix + "-" + name, ZeroReplicas: true,
		Settings: map[string]any{"number_of_shards": 1},
		Mappings: map[string]any{"dynamic": "strict", "properties": map[string]any{
			"name": map[string]any{"type": "text", "fields": map[string]any{"keyword": map[string]any{"type": "keyword"}}},
			"n":    map[string]any{"type": "long"},
		}}}
}

func idxESSink(t *testing.T, es *testenv.ESEnv, k *testenv.KafkaEnv, specs ...indexer.IndexSpec) *indexer.ESSink {
	t.Helper()
	aliases := map[string]string{}
	for _, s := range specs {
		if _, err := indexer.EnsureIndex(testenv.Ctx(t), es.Search, s); err != nil {
			t.Fatal(err)
		}
		aliases[s.Aggregate] = s.Alias
	}
	s, err := indexer.NewESSink(indexer.ESSinkConfig{Client: es.Search, Kind: es.Kind, Aliases: aliases, Kafka: []kgo.Opt{kgo.SeedBrokers(k.Brokers...)},
		TopicPrefix: k.Prefix, Partitions: 1, RetryBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		RecheckInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func idxWrite(t *testing.T, s *indexer.ESSink, docs ...wire.Document) {
	t.Helper()
	if err := s.Write(testenv.Ctx(t), docs); err != nil {
		t.Fatal(err)
	}
}

// TestESSinkVersions: the newest version wins whatever the arrival order;
// older writes succeed (409 counted) and leave the newer document; a
// duplicate (same version: the same build, so the same document) is simply
// written again (external_gte); deletes carry the version too.
func TestESSinkVersions(t *testing.T) { forEachEngine(t, testESSinkVersions) }

func testESSinkVersions(t *testing.T, engine string) {
	es, k := testenv.SearchEngine(t, engine), testenv.Kafka(t)
	spec := idxSpecStrict(es, "customer")
	s := idxESSink(t, es, k, spec)

	idxWrite(t, s, idxDoc("customer", `{"id":7}`, 10, `{"name":"v10"}`))
	idxWrite(t, s, idxDoc("customer", `{"id":7}`, 20, `{"name":"v20"}`))
	idxWrite(t, s, idxDoc("customer", `{"id":7}`, 15, `{"name":"late v15"}`), idxDoc("customer", `{"id":7}`, 20, `{"name":"v20"}`))
	if v, src, _ := idxGet(t, es, spec.Alias, "7"); v != 20 || src["name"] != "v20" {
		t.Errorf("after a late and a duplicate build: version %d %v, want 20 v20", v, src)
	}
	if st := s.Stats(); st.Written != 3 || st.Conflicts != 1 {
		t.Errorf("stats = %+v, want 3 written (v10, v20 and its duplicate), 1 conflict", st)
	}

	idxWrite(t, s, idxDoc("customer", `{"id":7}`, 12, "")) // a stale delete
	if v, _, found := idxGet(t, es, spec.Alias, "7"); !found || v != 20 {
		t.Errorf("a delete older than the document removed it (found %v, version %d)", found, v)
	}
	idxWrite(t, s, idxDoc("customer", `{"id":7}`, 30, ""), idxDoc("customer", `{"id":8}`, 30, "")) // 8 never existed: 404 is success
	if _, _, found := idxGet(t, es, spec.Alias, "7"); found {
		t.Error("a newer delete left the document")
	}
	idxWrite(t, s, idxDoc("customer", `{"id":7}`, 25, `{"name":"resurrected v25"}`))
	if _, src, found := idxGet(t, es, spec.Alias, "7"); found {
		t.Errorf("a build older than the delete resurrected the document: %v", src)
	}
	if st := s.Stats(); st.Deleted != 2 || st.Conflicts != 3 || st.DeadLettered != 0 {
		t.Errorf("stats = %+v, want 2 deleted, 3 conflicts", st)
	}
}

// TestESSinkCompositeIDs: _id is the text of a single id value, the JSON
// array of the values of a composite id.
func TestESSinkCompositeIDs(t *testing.T) { forEachEngine(t, testESSinkCompositeIDs) }

func testESSinkCompositeIDs(t *testing.T, engine string) {
	es, k := testenv.SearchEngine(t, engine), testenv.Kafka(t)
	line, sku := idxSpecStrict(es, "line"), idxSpecStrict(es, "sku")
	s := idxESSink(t, es, k, line, sku)
	idxWrite(t, s,
		idxDoc("line", `{"order_id":7,"line_no":2}`, 5, `{"n":2}`),
		idxDoc("line", `{"order_id":7,"line_no":3}`, 5, `{"n":3}`),
		idxDoc("sku", `{"code":"A-1 é"}`, 5, `{"n":1}`))
	for _, c := range []struct{ index, id string }{{line.Alias, "[7,2]"}, {line.Alias, "[7,3]"}, {sku.Alias, "A-1 é"}} {
		if _, _, found := idxGet(t, es, c.index, c.id); !found {
			t.Errorf("%s has no document with _id %q", c.index, c.id)
		}
	}
	idxWrite(t, s, idxDoc("line", `{"order_id":7,"line_no":2}`, 6, ""))
	if _, _, found := idxGet(t, es, line.Alias, "[7,2]"); found {
		t.Error("delete by composite id left the document")
	}
}

// TestESSinkDeadLetters (issue 5 acceptance 6): documents Elasticsearch
// refuses land in the DLQ with their reason while the others of the same
// batch are indexed.
func TestESSinkDeadLetters(t *testing.T) { forEachEngine(t, testESSinkDeadLetters) }

func testESSinkDeadLetters(t *testing.T, engine string) {
	es, k := testenv.SearchEngine(t, engine), testenv.Kafka(t)
	spec := idxSpecStrict(es, "customer")
	s := idxESSink(t, es, k, spec)
	ctx := testenv.Ctx(t)
	err := s.Write(ctx, []wire.Document{
		idxDoc("customer", `{"id":1}`, 10, `{"name":"ok one","n":1}`),
		idxDoc("customer", `{"id":2}`, 10, `{"name":"bad type","n":"not a number"}`),
		idxDoc("customer", `{"id":3}`, 10, `{"name":"unknown field","color":"red"}`),
		idxDoc("customer", `{"id":4}`, 10, `{"name":"ok two","n":4}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx, "customer"); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"1": true, "2": false, "3": false, "4": true} {
		if _, _, found := idxGet(t, es, spec.Alias, id); found != want {
			t.Errorf("document %s indexed = %v, want %v", id, found, want)
		}
	}
	recs := idxConsume(t, k, wire.DLQTopic(k.Prefix), 2)
	reasons := map[string]string{}
	for _, r := range recs {
		var l struct {
			Stage, Sink, Aggregate, Index, Reason string
			ID                                    json.RawMessage
			Version                               uint64
			Status                                int
		}
		if err := json.Unmarshal(r.Value, &l); err != nil {
			t.Fatal(err)
		}
		if l.Stage != "index" || l.Sink != es.Kind || l.Aggregate != "customer" || l.Version != 10 || l.Status != 400 ||
			l.Index != spec.Alias || !bytes.Equal(l.ID, r.Key) {
			t.Errorf("dead letter %s → %s", r.Key, r.Value)
		}
		reasons[string(r.Key)] = l.Reason
	}
	if !strings.Contains(reasons[`{"id":2}`], "mapper_parsing_exception") {
		t.Errorf("reason for id 2 = %q, want a mapper_parsing_exception", reasons[`{"id":2}`])
	}
	if !strings.Contains(reasons[`{"id":3}`], "strict_dynamic_mapping_exception") {
		t.Errorf("reason for id 3 = %q, want a strict_dynamic_mapping_exception", reasons[`{"id":3}`])
	}
	if st := s.Stats(); st.Written != 2 || st.DeadLettered != 2 {
		t.Errorf("stats = %+v, want 2 written, 2 dead-lettered", st)
	}
}

// TestESSinkRetriesReadOnlyIndex: a read-only index (disk flood stage, an
// operator's block) is an operational problem: Write retries with backoff
// and succeeds once the block is lifted; nothing goes to the DLQ.
func TestESSinkRetriesReadOnlyIndex(t *testing.T) { forEachEngine(t, testESSinkRetriesReadOnlyIndex) }

func testESSinkRetriesReadOnlyIndex(t *testing.T, engine string) {
	es, k := testenv.SearchEngine(t, engine), testenv.Kafka(t)
	spec := idxSpecStrict(es, "customer")
	s := idxESSink(t, es, k, spec)
	block := func(on bool) {
		code, body := es.Do(t, esapi.IndicesPutSettingsRequest{Index: []string{spec.IndexName()},
			Body: strings.NewReader(fmt.Sprintf(`{"index.blocks.read_only":%v}`, on))})
		if code != http.StatusOK {
			t.Fatalf("set read_only=%v: %d %s", on, code, body)
		}
	}
	block(true)
	t.Cleanup(func() { block(false) })
	done := make(chan error, 1)
	go func() {
		done <- s.Write(testenv.Ctx(t), []wire.Document{idxDoc("customer", `{"id":1}`, 10, `{"name":"x"}`)})
	}()
	time.Sleep(400 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Write returned %v while the index was read-only; want it to keep retrying", err)
	default:
	}
	block(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, _, found := idxGet(t, es, spec.Alias, "1"); !found {
		t.Error("document not indexed after the block was lifted")
	}
	if st := s.Stats(); st.Retries == 0 || st.DeadLettered != 0 || st.Written != 1 {
		t.Errorf("stats = %+v, want retries, 1 written, no dead letters", st)
	}
}

// TestESSinkMissingAlias: writing to an aggregate whose alias does not
// exist fails (the batch is retried) instead of letting Elasticsearch
// auto-create an index under the alias's name.
func TestESSinkMissingAlias(t *testing.T) { forEachEngine(t, testESSinkMissingAlias) }

func testESSinkMissingAlias(t *testing.T, engine string) {
	es, k := testenv.SearchEngine(t, engine), testenv.Kafka(t)
	s := idxESSink(t, es, k)
	err := s.Write(testenv.Ctx(t), []wire.Document{idxDoc(es.Prefix+"-nothing", `{"id":1}`, 10, "")})
	if err == nil || !strings.Contains(err.Error(), "alias does not exist") {
		t.Fatalf("Write = %v, want an alias-missing error", err)
	}
	if code, _ := es.Do(t, esapi.IndicesExistsRequest{Index: []string{es.Prefix + "-nothing"}}); code != http.StatusNotFound {
		t.Errorf("an index named like the missing alias was created (HEAD status %d)", code)
	}
}

// TestEnsureIndex: creates <alias>_<hash> behind the alias once, is
// idempotent, and reports a mapping change instead of applying it.
func TestEnsureIndex(t *testing.T) { forEachEngine(t, testEnsureIndex) }

func testEnsureIndex(t *testing.T, engine string) {
	es := testenv.SearchEngine(t, engine)
	ctx := testenv.Ctx(t)
	spec := idxSpecStrict(es, "customer")
	for range 2 {
		got, err := indexer.EnsureIndex(ctx, es.Search, spec)
		if err != nil || got != spec.IndexName() {
			t.Fatalf("EnsureIndex = %q, %v; want %q", got, err, spec.IndexName())
		}
	}
	code, body := es.Do(t, esapi.IndicesGetSettingsRequest{Index: []string{spec.Alias}, Name: []string{"index.number_of_replicas"}})
	if code != http.StatusOK || !strings.Contains(string(body), `"number_of_replicas":"0"`) {
		t.Errorf("settings: %d %s, want number_of_replicas 0", code, body)
	}
	changed := spec
	changed.Mappings = map[string]any{"properties": map[string]any{"name": map[string]any{"type": "keyword"}}}
	_, err := indexer.EnsureIndex(ctx, es.Search, changed)
	var mc *indexer.MappingChangedError
	if !errors.As(err, &mc) || !strings.Contains(err.Error(), "decant backfill customer --reindex") {
		t.Fatalf("EnsureIndex with changed mappings = %v, want a MappingChangedError naming the reindex command", err)
	}
	if code, _ := es.Do(t, esapi.IndicesExistsRequest{Index: []string{changed.IndexName()}}); code != http.StatusNotFound {
		t.Error("EnsureIndex created the new index: a mapping change must wait for a reindex")
	}
}

// TestEnsureIndexReplacesAutoCreatedIndex: an index under decant's concrete
// name without decant's _meta (auto-created by a late write after the index
// was deleted) is dropped and created again with the right mappings.
func TestEnsureIndexReplacesAutoCreatedIndex(t *testing.T) {
	forEachEngine(t, testEnsureIndexReplacesAutoCreatedIndex)
}

func testEnsureIndexReplacesAutoCreatedIndex(t *testing.T, engine string) {
	es := testenv.SearchEngine(t, engine)
	spec := idxSpecStrict(es, "customer")
	if code, body := es.Do(t, esapi.IndexRequest{Index: spec.IndexName(), DocumentID: "1", Body: strings.NewReader(`{"n":"dynamic text"}`)}); code != http.StatusCreated {
		t.Fatalf("auto-create %s: %d %s", spec.IndexName(), code, body)
	}
	if _, err := indexer.EnsureIndex(testenv.Ctx(t), es.Search, spec); err != nil {
		t.Fatal(err)
	}
	code, body := es.Do(t, esapi.IndicesGetMappingRequest{Index: []string{spec.Alias}})
	if code != http.StatusOK || !strings.Contains(string(body), `"decant_hash":"`+spec.Hash()+`"`) || !strings.Contains(string(body), `"dynamic":"strict"`) {
		t.Errorf("mapping behind the alias: %d %s", code, body)
	}
}

// TestESSinkOneActionPerDocumentID: two documents of one write that land
// on one _id ({"id":"2"} deleted and {"id":2} built, as after a key
// column's type changed) become one action, the newer or later one, so a
// retry that resends only some actions cannot apply them out of order.
func TestESSinkOneActionPerDocumentID(t *testing.T) {
	forEachEngine(t, testESSinkOneActionPerDocumentID)
}

func testESSinkOneActionPerDocumentID(t *testing.T, engine string) {
	es, k := testenv.SearchEngine(t, engine), testenv.Kafka(t)
	spec := idxSpecStrict(es, "customer")
	s := idxESSink(t, es, k, spec)
	idxWrite(t, s, idxDoc("customer", `{"id":2}`, 5, `{"name":"old","n":1}`))
	idxWrite(t, s,
		idxDoc("customer", `{"id":"2"}`, 9, ""), // deleted, under the text encoding
		idxDoc("customer", `{"id":2}`, 9, `{"name":"built","n":2}`),
		idxDoc("customer", `{"id":3}`, 9, `{"name":"three","n":3}`),
		idxDoc("customer", `{"id":"3"}`, 8, ""), // older: loses
	)
	for id, want := range map[string]string{"2": "built", "3": "three"} {
		v, src, found := idxGet(t, es, spec.Alias, id)
		if !found || src["name"] != want || v != 9 {
			t.Errorf("document %s: found %v, version %d, %v; want %q at version 9", id, found, v, src, want)
		}
	}
}
