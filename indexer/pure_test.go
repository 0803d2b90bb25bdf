package indexer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/decant-cdc/decant/wire"
)

func TestDocumentID(t *testing.T) {
	for _, tc := range []struct{ id, want, err string }{
		{`{"id":7}`, "7", ""},
		{`{"id":"abc"}`, "abc", ""},
		{`{"id":"a \"q\" é"}`, `a "q" é`, ""},
		{`{"id":12345678901234567890}`, "12345678901234567890", ""},
		{`{"id":1.50}`, "1.50", ""},
		{`{"id":true}`, "true", ""},
		{`{"id":"5b8f0c1e-6a8e-4d43-9f3c-2f5a1b7c9d00"}`, "5b8f0c1e-6a8e-4d43-9f3c-2f5a1b7c9d00", ""},
		{`{"order_id":7,"line_no":2}`, "[7,2]", ""},
		{`{ "b" : "x" , "a" : 1 }`, `["x",1]`, ""}, // column order kept, whitespace dropped
		{`{"a":"x","b":null}`, `["x",null]`, ""},
		{`{}`, "", "at least one column"},
		{`{"id":null}`, "", "null"},
		{`{"id":""}`, "", "empty string"},
		{`{"id":{"x":1}}`, "", "string, number or boolean"},
		{`[7]`, "", "JSON object"},
		{`7`, "", "JSON object"},
		{`{"id":7} x`, "", "trailing"},
		{``, "", "JSON object"},
	} {
		got, err := DocumentID(json.RawMessage(tc.id))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("DocumentID(%s) error = %v, want one containing %q", tc.id, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("DocumentID(%s) = %q, %v; want %q", tc.id, got, err, tc.want)
		}
	}
}

// TestSimpleIDMatchesJSON: the fast path of idValues accepts only ids the
// general one reads the same.
func TestSimpleIDMatchesJSON(t *testing.T) {
	for _, id := range []string{
		`{"id":7}`, `{"id":-7}`, `{"id":1.50}`, `{"id":1e5}`, `{"id":-0}`, `{"id":12345678901234567890}`,
		`{"id":"abc"}`, `{"id":"é ü"}`, `{"id":""}`, `{"id":"a\"b"}`, `{"id":"a\u0041"}`, `{"i\"d":1}`,
		`{"id":01}`, `{"id":1-}`, `{"id":1.}`, `{"id":--1}`, `{"id":1e}`, `{"id":"x"}x}`, `{"id":"x","y":1}`,
		`{"id":7,"x":"}`, `{"id":7,"x":"a"}`, `{}`, `{"id":true}`, `{"id":null}`, `{"id": 7}`, `{"id":7 }`, `{"":7}`, `{"id":"a` + "\t" + `"}`,
	} {
		fast, ok := fastIDValues([]byte(id))
		slow, err := idValuesJSON(json.RawMessage(id))
		if !ok {
			continue
		}
		if err != nil || !slices.EqualFunc(slow, fast, func(x, y json.RawMessage) bool { return string(x) == string(y) }) {
			t.Errorf("%s: fast path %q, general path %q, %v", id, fast, slow, err)
		}
	}
	for _, id := range []string{`{"id":7}`, `{"order_id":3,"sku":"A-1"}`} {
		if _, ok := fastIDValues([]byte(id)); !ok {
			t.Errorf("%s should take the fast path", id)
		}
	}
}

func TestCheckDocument(t *testing.T) {
	for _, tc := range []struct {
		d   wire.Document
		err string
	}{
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":1}`), Doc: json.RawMessage(`{}`)}, ""},
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":1}`), Deleted: true}, ""},
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":1}`), Deleted: true, Doc: json.RawMessage(`null`)}, ""},
		{wire.Document{ID: json.RawMessage(`{"id":1}`), Doc: json.RawMessage(`{}`)}, "no aggregate"},
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":1}`), Deleted: true, Doc: json.RawMessage(`{}`)}, "must have doc null"},
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":1}`)}, "doc is null"},
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":1}`), Deleted: true, Doc: json.RawMessage(" null\n")}, ""},
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":1}`), Doc: json.RawMessage(" null ")}, "doc is null"},
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":1}`), Doc: json.RawMessage("  ")}, "doc is null"},
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":1}`), Doc: json.RawMessage(`{`)}, "not valid JSON"},
		{wire.Document{Aggregate: "c", ID: json.RawMessage(`7`), Doc: json.RawMessage(`{}`)}, "JSON object"},
	} {
		err := checkDocument(&tc.d)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("checkDocument(%+v) = %v, want %q", tc.d, err, tc.err)
		}
	}
}

func TestEncodeAction(t *testing.T) {
	idx := wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":7}`), Version: 42, Doc: json.RawMessage("{\"a\":\n1}")}
	del := wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":7}`), Version: 43, Deleted: true}
	got := string(encodeAction(&idx, "7", "customers", true)) + string(encodeAction(&del, "7", "customers", true)) +
		string(encodeAction(&idx, `["x",1]`, "customers_0badf00d", false))
	want := `{"index":{"_index":"customers","_id":"7","version":42,"version_type":"external_gte","require_alias":true}}
{"a":1}
{"delete":{"_index":"customers","_id":"7","version":43,"version_type":"external_gte"}}
{"index":{"_index":"customers_0badf00d","_id":"[\"x\",1]","version":42,"version_type":"external_gte"}}
{"a":1}
`
	if got != want {
		t.Errorf("bulk body:\n%s\nwant:\n%s", got, want)
	}
	// A built document, compacted by the build stage, gives the same body.
	built := idx
	built.Doc, built.Built = wire.AppendCompact(nil, idx.Doc), true
	if got, want := string(encodeAction(&built, "7", "customers", true)), string(encodeAction(&idx, "7", "customers", true)); got != want {
		t.Errorf("built document's action:\n%s\nwant:\n%s", got, want)
	}
}

// Regression: the action's buffer had room for 128 bytes besides the
// document, less than the action line of an index named like the
// benchmarks' ("t46132f2a85-customer_81854ffc") with the largest version,
// so every action of a built document was copied into a buffer of twice
// its size. One allocation per action, whatever the index name and id.
func TestEncodeActionAllocatesOnce(t *testing.T) {
	d := wire.Document{Aggregate: "c", ID: json.RawMessage(`{"id":7}`), Version: 1<<64 - 1, Built: true,
		Doc: json.RawMessage(`{"id":7,"name":"` + strings.Repeat("n", 1000) + `"}`)}
	index, id := "t46132f2a85-customer_81854ffc-"+strings.Repeat("x", 100), "1234567890123456789"
	if n := testing.AllocsPerRun(20, func() { encodeAction(&d, id, index, true) }); n != 1 {
		t.Errorf("encodeAction allocated %v times, want 1", n)
	}
}

func TestClassify(t *testing.T) {
	e := func(typ string) *bulkError { return &bulkError{Type: typ, Reason: "r"} }
	for _, tc := range []struct {
		del  bool
		it   bulkItem
		want outcome
	}{
		{false, bulkItem{Status: 201, Result: "created"}, outcomeOK},
		{false, bulkItem{Status: 200, Result: "updated"}, outcomeOK},
		{true, bulkItem{Status: 200, Result: "deleted"}, outcomeOK},
		{true, bulkItem{Status: 404, Result: "not_found"}, outcomeOK},
		{false, bulkItem{Status: 409, Error: e("version_conflict_engine_exception")}, outcomeConflict},
		{true, bulkItem{Status: 409, Error: e("version_conflict_engine_exception")}, outcomeConflict},
		{false, bulkItem{Status: 429, Error: e("es_rejected_execution_exception")}, outcomeRetry},
		{false, bulkItem{Status: 503, Error: e("unavailable_shards_exception")}, outcomeRetry},
		{false, bulkItem{Status: 403, Error: e("cluster_block_exception")}, outcomeRetry},
		{false, bulkItem{Status: 404, Error: e("index_not_found_exception")}, outcomeRetry},
		{true, bulkItem{Status: 404, Error: e("index_not_found_exception")}, outcomeRetry},
		{false, bulkItem{Status: 400, Error: e("mapper_parsing_exception")}, outcomeReject},
		{false, bulkItem{Status: 400, Error: e("strict_dynamic_mapping_exception")}, outcomeReject},
		{false, bulkItem{Status: 400, Error: e("illegal_argument_exception")}, outcomeReject},
	} {
		if got := classify(tc.del, tc.it); got != tc.want {
			t.Errorf("classify(delete=%v, %+v) = %d, want %d", tc.del, tc.it, got, tc.want)
		}
	}
}

func TestParseBulkResponse(t *testing.T) {
	body := `{"took":3,"errors":true,"items":[
		{"index":{"_index":"c_1","_id":"1","status":201,"result":"created"}},
		{"index":{"_index":"c_1","_id":"2","status":400,"error":{"type":"mapper_parsing_exception","reason":"failed to parse field [n]","caused_by":{"type":"illegal_argument_exception","reason":"For input string: \"abc\""}}}},
		{"delete":{"_index":"c_1","_id":"9","status":404,"result":"not_found"}}]}`
	items, err := parseBulkResponse([]byte(body), 3)
	if err != nil {
		t.Fatal(err)
	}
	if items[0].Status != 201 || items[2].Result != "not_found" {
		t.Errorf("items = %+v", items)
	}
	if got, want := items[1].Error.String(), `mapper_parsing_exception: failed to parse field [n] (caused by illegal_argument_exception: For input string: "abc")`; got != want {
		t.Errorf("reason = %s, want %s", got, want)
	}
	if _, err := parseBulkResponse([]byte(body), 4); err == nil {
		t.Error("item count mismatch not detected")
	}
}

func TestVersionGuard(t *testing.T) {
	g := newVersionGuard(2)
	steps := []struct {
		key     string
		version uint64
		want    bool
	}{
		{"a", 5, true}, {"a", 4, false}, {"a", 5, true}, {"a", 6, true},
		{"b", 1, true}, {"c", 1, true}, // a is evicted: the guard is bounded
		{"a", 1, true}, {"c", 0, false},
	}
	for i, s := range steps {
		if got := g.admit("t", []byte(s.key), s.version); got != s.want {
			t.Errorf("step %d: admit(%s, %d) = %v, want %v", i, s.key, s.version, got, s.want)
		}
	}
	if !newVersionGuard(-1).admit("t", []byte("a"), 0) {
		t.Error("a disabled guard must admit everything")
	}
	// The least recently admitted key is forgotten, not the first admitted;
	// the same key of another topic is another key.
	g = newVersionGuard(2)
	for i, s := range []struct {
		topic, key string
		version    uint64
		want       bool
	}{
		{"t", "x", 1, true}, {"t", "y", 1, true}, {"t", "x", 2, true}, // x is now the more recent
		{"t", "z", 1, true},  // y is forgotten
		{"t", "x", 1, false}, // x is remembered (2)
		{"t", "y", 0, true},  // y was forgotten; z is forgotten now
		{"u", "x", 0, true},  // another topic: x is forgotten now
		{"t", "z", 0, true}, {"t", "x", 0, true},
	} {
		if got := g.admit(s.topic, []byte(s.key), s.version); got != s.want {
			t.Errorf("recency step %d: admit(%s, %s, %d) = %v, want %v", i, s.topic, s.key, s.version, got, s.want)
		}
	}
}

// TestVersionGuardAllocatesNothing: a full guard admits a key it has not
// seen without allocating (it forgets the oldest in place), so a backfill
// of millions of documents adds nothing for the collector to scan.
func TestVersionGuardAllocatesNothing(t *testing.T) {
	const size = 1000
	g, keys := fullGuard(size, 3*size)
	i := size
	if n := testing.AllocsPerRun(size, func() {
		if !g.admit("decant.agg.customer", keys[i], 1) {
			t.Fatalf("key %d not admitted", i)
		}
		i++
	}); n != 0 {
		t.Errorf("admitting a new key into a full guard allocates %.1f times, want 0", n)
	}
}

func TestIndexSpec(t *testing.T) {
	s := IndexSpec{Aggregate: "customer", Alias: "customers",
		Settings: map[string]any{"number_of_shards": 1},
		Mappings: map[string]any{"properties": map[string]any{"id": map[string]any{"type": "long"}, "name": map[string]any{"type": "text"}}}}
	h := s.Hash()
	if len(h) != 8 || s.IndexName() != "customers_"+h || s.NextAlias() != "customers-next" {
		t.Fatalf("hash %q, index %q, next %q", h, s.IndexName(), s.NextAlias())
	}
	r := s
	r.Settings = map[string]any{"number_of_shards": 1, "number_of_replicas": 2}
	r.ZeroReplicas = true
	if r.Hash() != h {
		t.Error("the replica count must not change the hash: it can change on a live index")
	}
	m := s
	m.Mappings = map[string]any{"properties": map[string]any{"id": map[string]any{"type": "keyword"}, "name": map[string]any{"type": "text"}}}
	if m.Hash() == h {
		t.Error("a mapping change must change the hash")
	}
	// Filters and computed fields count (issue 18: a changed where: is
	// reindexed), and only when there are some: the hash of an aggregate
	// without them is the one of before.
	old, _ := json.Marshal(map[string]any{"settings": s.Settings, "mappings": s.Mappings})
	if sum := sha256.Sum256(old); hex.EncodeToString(sum[:4]) != h {
		t.Error("the hash of an aggregate without filters or computed fields changed: every such index would be reindexed on upgrade")
	}
	f, g := s, s
	f.DocumentSQL = []string{"aggregates.customer.where: deleted_at IS NULL"}
	g.DocumentSQL = []string{"aggregates.customer.where: deleted_at IS NOT NULL"}
	if f.Hash() == h || g.Hash() == f.Hash() {
		t.Error("a filter change must change the hash")
	}
	var body struct {
		Settings map[string]any `json:"settings"`
		Mappings map[string]any `json:"mappings"`
	}
	z := s
	z.ZeroReplicas = true
	_ = json.Unmarshal(z.body(false), &body)
	if body.Settings["number_of_replicas"] != float64(0) || body.Mappings["_meta"].(map[string]any)["decant_hash"] != h {
		t.Errorf("body = %s", z.body(false))
	}
	_ = json.Unmarshal(r.body(false), &body)
	if body.Settings["number_of_replicas"] != float64(2) {
		t.Errorf("ZeroReplicas must not override the settings' replicas: %s", r.body(false))
	}
}

// TestLoadSettings: a bulk load turns refresh off and replicas to 0
// wherever the mapping set them (top level, "index.x", nested "index"),
// leaves replicas to auto_expand_replicas, marks the index, and
// restoredSettings gives back the mapping's values (null: the default).
func TestLoadSettings(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings map[string]any
		zero     bool
		load     string // the load body's settings, as JSON
		restored string
	}{
		{"none", map[string]any{}, false,
			`{"number_of_replicas":0,"refresh_interval":"-1"}`, `{"index":{"number_of_replicas":null,"refresh_interval":null}}`},
		{"zero replicas", map[string]any{}, true,
			`{"number_of_replicas":0,"refresh_interval":"-1"}`, `{"index":{"number_of_replicas":0,"refresh_interval":null}}`},
		{"top level", map[string]any{"refresh_interval": "5s", "number_of_replicas": 2}, true,
			`{"number_of_replicas":0,"refresh_interval":"-1"}`, `{"index":{"number_of_replicas":2,"refresh_interval":"5s"}}`},
		{"dotted", map[string]any{"index.refresh_interval": "30s", "index.number_of_replicas": 1}, false,
			`{"number_of_replicas":0,"refresh_interval":"-1"}`, `{"index":{"number_of_replicas":1,"refresh_interval":"30s"}}`},
		{"nested", map[string]any{"index": map[string]any{"refresh_interval": "2s", "number_of_shards": 3}}, false,
			`{"index":{"number_of_shards":3},"number_of_replicas":0,"refresh_interval":"-1"}`, `{"index":{"number_of_replicas":null,"refresh_interval":"2s"}}`},
		{"auto expand", map[string]any{"auto_expand_replicas": "0-1"}, false,
			`{"auto_expand_replicas":"0-1","refresh_interval":"-1"}`, `{"index":{"refresh_interval":null}}`},
	} {
		spec := IndexSpec{Aggregate: "a", Alias: "a", Settings: c.settings, ZeroReplicas: c.zero, Mappings: map[string]any{}}
		var body struct {
			Settings json.RawMessage `json:"settings"`
			Mappings struct {
				Meta map[string]any `json:"_meta"`
			} `json:"mappings"`
		}
		if err := json.Unmarshal(spec.body(true), &body); err != nil {
			t.Fatal(err)
		}
		if string(body.Settings) != c.load {
			t.Errorf("%s: load settings %s, want %s", c.name, body.Settings, c.load)
		}
		if body.Mappings.Meta[loadingMeta] != true {
			t.Errorf("%s: the load body does not mark the index: %v", c.name, body.Mappings.Meta)
		}
		if got, _ := json.Marshal(spec.restoredSettings()); string(got) != c.restored {
			t.Errorf("%s: restored %s, want %s", c.name, got, c.restored)
		}
		body.Mappings.Meta = nil
		if err := json.Unmarshal(spec.body(false), &body); err != nil || body.Mappings.Meta[loadingMeta] != nil {
			t.Errorf("%s: a normal body is marked loading: %v %v", c.name, body.Mappings.Meta, err)
		}
	}
}

func TestParseBulkResponseItemWithoutAction(t *testing.T) {
	if _, err := parseBulkResponse([]byte(`{"errors":false,"items":[{"index":{"status":201}},{}]}`), 2); err == nil {
		t.Error("an item naming no action was accepted")
	}
}

// BenchmarkVersionGuard admits keys the guard has not seen into a full
// guard of the default size, as a backfill does: each admit forgets the
// least recently written key.
func BenchmarkVersionGuard(b *testing.B) {
	const size = 100_000
	g, keys := fullGuard(size, 2*size)
	b.ReportAllocs()
	i := size
	for b.Loop() {
		g.admit("decant.agg.customer", keys[i%len(keys)], uint64(i))
		i++
	}
}

// TestVersionGuardMatchesReference drives the guard and a plain LRU model
// with the same random admits and requires the same answers.
func TestVersionGuardMatchesReference(t *testing.T) {
	const size = 16
	g := newVersionGuard(size)
	type ref struct {
		key     string
		version uint64
	}
	var lru []ref // most recent last
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 20_000 {
		topic := []string{"t", "u"}[rng.IntN(2)]
		key := strconv.Itoa(rng.IntN(40))
		version := uint64(rng.IntN(20))
		want := true
		i := slices.IndexFunc(lru, func(r ref) bool { return r.key == topic+"\x00"+key })
		if i >= 0 {
			want = version >= lru[i].version
			if want {
				lru = append(slices.Delete(lru, i, i+1), ref{topic + "\x00" + key, version})
			}
		} else {
			lru = append(lru, ref{topic + "\x00" + key, version})
			if len(lru) > size {
				lru = lru[1:]
			}
		}
		if got := g.admit(topic, []byte(key), version); got != want {
			t.Fatalf("step %d: admit(%s, %s, %d) = %v, want %v", step, topic, key, version, got, want)
		}
	}
}

// fullGuard returns a guard of size keys holding the first size of n keys
// ({"id":0}, {"id":1}, …), and the n keys.
func fullGuard(size, n int) (*versionGuard, [][]byte) {
	g := newVersionGuard(size)
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(`{"id":` + strconv.Itoa(i) + `}`)
	}
	for _, k := range keys[:size] {
		g.admit("decant.agg.customer", k, 1)
	}
	return g, keys
}

// FuzzScanBulkStatuses: whatever scanBulkStatuses reads, encoding/json
// reads too, to the same items.
func FuzzScanBulkStatuses(f *testing.F) {
	for _, s := range []string{
		`{"items":[{"index":{"status":201}},{"delete":{"status":404}},{"create":{"status":200}},{"update":{"status":200}}]}`,
		`{"items":[]}`,
		`{"items":[{"index":{"status":409,"error":{"type":"version_conflict_engine_exception","reason":"x"}}}]}`,
		`{"items":[{"INDEX":{"status":201}}]}`,
		`{"items":[{"index":{"status":099}}]}`,
		`{"items":[{"index":{"status":201}} ]}`,
	} {
		f.Add([]byte(s), 1)
	}
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		got, ok := scanBulkStatuses(body, n)
		if !ok {
			return
		}
		want, err := decodeBulkResponse(body, n)
		if err != nil {
			t.Fatalf("scanned %q, which encoding/json refuses: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scanned %q as %+v, encoding/json reads %+v", body, got, want)
		}
	})
}

func TestScanBulkStatuses(t *testing.T) {
	body := []byte(`{"items":[{"index":{"status":201}},{"delete":{"status":404}},{"create":{"status":200}},{"update":{"status":503}}]}`)
	items, ok := scanBulkStatuses(body, 4)
	if !ok {
		t.Fatal("a filtered response of four items was not scanned")
	}
	if want := []bulkItem{{Status: 201}, {Status: 404}, {Status: 200}, {Status: 503}}; !reflect.DeepEqual(items, want) {
		t.Fatalf("items = %+v, want %+v", items, want)
	}
	for _, refused := range []string{
		`{"items":[{"index":{"status":409,"error":{"type":"version_conflict_engine_exception","reason":"x"}}}]}`, // an error: encoding/json reads it
		`{"items":[{"index":{"status":201}}]}`,                                   // one item for two actions
		`{"took":1,"items":[{"index":{"status":201}},{"index":{"status":201}}]}`, // not filtered
		`{"items":[{"index":{"status":201}},{"index":{"status":2010}}]}`,
		`{"items":[{"index":{"status":201}},{"index":{"status":201}}]}x`,
	} {
		if _, ok := scanBulkStatuses([]byte(refused), 2); ok {
			t.Errorf("scanned %s", refused)
		}
	}
	// What the scanner refuses, parseBulkResponse still reads.
	items, err := parseBulkResponse([]byte(`{"items":[{"index":{"status":201}},{"index":{"status":409,"error":{"type":"version_conflict_engine_exception","reason":"x"}}}]}`), 2)
	if err != nil || items[1].Status != 409 || items[1].Error == nil || items[1].Error.Type != "version_conflict_engine_exception" {
		t.Fatalf("parseBulkResponse of a conflict = %+v, %v", items, err)
	}
}

// BenchmarkParseBulkResponse reads the filtered response of a bulk
// request of 2,000 documents, all written.
func BenchmarkParseBulkResponse(b *testing.B) {
	body := []byte(`{"items":[`)
	for i := range 2000 {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"index":{"status":201}}`...)
	}
	body = append(body, "]}"...)
	for _, c := range []struct {
		name  string
		parse func([]byte, int) ([]bulkItem, error)
	}{{"scan", parseBulkResponse}, {"encoding-json", decodeBulkResponse}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := c.parse(body, 2000); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
