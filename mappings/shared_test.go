package mappings

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/decant-cdc/decant/internal/testenv"
)

func mark(ref string, vals ...string) string {
	return "\x01" + ref + "\x02" + strings.Join(vals, "\x02") + "\x03"
}

// spliced adds doc to a set of len(objs) shared relations, gives each
// key it refers to its object from objs[relation] (by marker key; ""
// for a key whose row does not exist), and splices them in after pre.
func spliced(t *testing.T, objs []map[string]string, pre, doc string) (string, error) {
	t.Helper()
	a := &Aggregate{}
	for range objs {
		a.Shared = append(a.Shared, &Shared{Node: &Node{Path: "p"}})
	}
	s := a.NewSharedSet()
	i, err := s.Add([]byte(doc))
	if err != nil || i < 0 {
		return doc, err
	}
	for r, m := range objs {
		s.objs[r] = make([][]byte, len(s.keys[r]))
		for p, key := range s.keys[r] {
			var vals []string
			for _, v := range key {
				vals = append(vals, string(v))
			}
			o, ok := m[strings.Join(vals, "\x02")]
			if !ok {
				t.Fatalf("no object for key %q of shared %d", vals, r)
			}
			if o != "" {
				s.objs[r][p] = []byte(o)
			}
		}
	}
	out, err := s.AppendSpliced([]byte(pre), i, nil)
	if err == nil && len(out)-len(pre) != s.SplicedLen(i) {
		t.Errorf("SplicedLen = %d, the spliced document has %d bytes", s.SplicedLen(i), len(out)-len(pre))
	}
	return string(out), err
}

func TestSharedSetSplices(t *testing.T) {
	objs := []map[string]string{
		{"7": `{"id":7}`, "8": ""},
		{`"eu"` + "\x02" + `"b,c"`: `{"city":"x"}`},
	}
	doc := `{"a":[{"p":` + mark("0", "7") + `},{"p":` + mark("0", "8") + `},{"p":` + mark("0", "7") + `}],"w":` + mark("1", `"eu"`, `"b,c"`) + `}`
	got, err := spliced(t, objs, "pre:", doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := `pre:{"a":[{"p":{"id":7}},{"p":null},{"p":{"id":7}}],"w":{"city":"x"}}`; got != want {
		t.Errorf("spliced = %s\nwant %s (a key without a row is null)", got, want)
	}
	plain := `{"a":"no markers"}`
	if got, err := spliced(t, objs, "", plain); err != nil || got != plain {
		t.Errorf("a document without markers = %s, %v; want it unchanged", got, err)
	}
	for _, bad := range []string{
		`{"p":` + "\x01" + `0` + `}`,                    // no separator, no end
		`{"p":` + "\x01\x02" + `7` + "\x03" + `}`,       // no index
		`{"p":` + "\x01" + `x` + "\x02" + `7` + "\x03}", // index not a number
		`{"p":` + "\x01" + `0` + "\x02" + `7}`,          // no end
		`{"p":` + mark("2", "7") + `}`,                  // no such shared relation
	} {
		if got, err := spliced(t, objs, "", bad); err == nil {
			t.Errorf("splicing %q = %q, want an error", bad, got)
		}
	}
	// Splicing before Fetch built the objects is an error, not nulls.
	a := &Aggregate{Shared: []*Shared{{Node: &Node{}}}}
	s := a.NewSharedSet()
	i, err := s.Add([]byte(`{"p":` + mark("0", "7") + `}`))
	if err != nil || i != 0 {
		t.Fatalf("Add = %d, %v; want 0", i, err)
	}
	if got, err := s.AppendSpliced(nil, i, nil); err == nil {
		t.Errorf("AppendSpliced before Fetch = %q, want an error", got)
	}
}

func TestSharedSetAddsEachKeyOnce(t *testing.T) {
	a := &Aggregate{Shared: []*Shared{{Node: &Node{}}, {Node: &Node{}}}}
	s := a.NewSharedSet()
	for _, doc := range []string{
		`{"x":` + mark("0", "1") + `,"y":` + mark("0", "2") + `,"z":` + mark("1", `"a"`, `"b"`) + `}`,
		`{"x":` + mark("0", "2") + `}`,
	} {
		buf := []byte(doc)
		i, err := s.Add(buf)
		if err != nil || i < 0 {
			t.Fatalf("Add(%q) = %d, %v; want an index", doc, i, err)
		}
		clear(buf) // Add keeps its own copy: the caller's buffer is reused
		if got := string(s.copies[s.docs[i].start:s.docs[i].end]); got != doc {
			t.Errorf("kept document %d = %q, want %q", i, got, doc)
		}
	}
	if i, err := s.Add([]byte(`{"x":1}`)); err != nil || i >= 0 {
		t.Errorf("Add of a document without markers = %d, %v; want -1", i, err)
	}
	got, _ := json.Marshal([][][]json.RawMessage{s.Keys(0), s.Keys(1)})
	if want := `[[[1],[2]],[["a","b"]]]`; string(got) != want {
		t.Errorf("keys = %s, want %s", got, want)
	}
	if _, err := s.Add([]byte(`{"x":` + mark("5", "1") + `}`)); err == nil {
		t.Error("Add accepted a marker of a shared relation the statement does not have")
	}
}

// sharedMapping has a shared many-to-one of every kind of key, and the
// places where a many-to-one stays inline.
const sharedMapping = `version: 1
aggregates:
  order:
    table: orders
    relations:
      buyer: {table: people, references: buyer_id, columns: [name]}
      lines:
        table: lines
        foreign_key: order_id
        columns: [id, qty]
        relations:
          product:
            table: products
            references: product_id
            columns: [id, sku, title]
            relations:
              brand: {table: brands, references: brand_id, columns: [name]}
              notes: {table: product_notes, foreign_key: product_id, value: note}
          product_title: {table: products, references: product_id, value: title}
          cheap: {table: products, references: product_id, columns: [id], where: "title LIKE 'c%'"}
          warehouse: {table: warehouses, references: [wh_region, wh_code], columns: [city]}
          label: {table: labels, references: label, columns: [name, color]}
          device: {table: devices, references: device_id}
          slot: {table: slots, references: slot_at}
          spec: {table: specs, references: spec, columns: [note]}
      loose:
        table: loose_lines
        foreign_key: order_id
        relations:
          product: {table: products, references: product_id, columns: [id, title]}
`

const sharedSchema = `
CREATE TABLE people (id int PRIMARY KEY, name text);
CREATE TABLE brands (id int PRIMARY KEY, name text);
CREATE TABLE products (id int PRIMARY KEY, sku text, title text, brand_id int REFERENCES brands (id));
CREATE TABLE product_notes (product_id int REFERENCES products (id), n int, note text, PRIMARY KEY (product_id, n));
CREATE TABLE warehouses (region text, code text, city text, PRIMARY KEY (region, code));
CREATE TABLE labels (name text PRIMARY KEY, color text);
CREATE TABLE devices (id uuid PRIMARY KEY, model text);
CREATE TABLE slots (at timestamptz PRIMARY KEY, what text);
CREATE TABLE specs (spec jsonb PRIMARY KEY, note text);
CREATE TABLE orders (id int PRIMARY KEY, buyer_id int, note text);
CREATE TABLE lines (
  id int PRIMARY KEY, order_id int REFERENCES orders (id), qty int,
  product_id int, -- no foreign key: a line may name a product that does not exist
  wh_region text, wh_code text, label text, device_id uuid, slot_at timestamptz, spec jsonb);
CREATE TABLE loose_lines (order_id int, product_id int, qty int);
INSERT INTO people VALUES (1, 'Ann');
INSERT INTO brands VALUES (1, 'Acme'), (2, 'Zed');
INSERT INTO products VALUES (1, 'S1', 'cheap pen', 1), (2, 'S2', 'dear "ink"', 2), (3, 'S3', 'cup', NULL);
INSERT INTO product_notes VALUES (1, 1, 'blue'), (1, 2, 'red'), (3, 1, 'white');
INSERT INTO warehouses VALUES ('eu', 'a,b', 'Rome'), ('eu', 'c', 'Oslo'), ('us', 'a,b', 'Reno');
INSERT INTO labels VALUES (E'tab\there "q" \\ \u00e9 \x01\x02\x03', 'red'), ('plain', 'blue');
INSERT INTO devices VALUES ('6f1c1b0e-4a52-4c71-9a32-2a1f7f0c9e11', 'phone');
INSERT INTO slots VALUES ('2026-01-02 03:04:05.123456+00', 'morning');
INSERT INTO specs VALUES ('{"a": 1}', 'a spec');
INSERT INTO orders VALUES (1, 1, 'two lines, one product'), (2, NULL, 'every key kind'), (3, 1, 'no lines');
INSERT INTO lines VALUES
  (10, 1, 1, 1, 'eu', 'a,b', 'plain', NULL, NULL, NULL),
  (11, 1, 2, 1, 'us', 'a,b', 'plain', NULL, NULL, NULL),
  (20, 2, 1, 2, 'eu', 'c', E'tab\there "q" \\ \u00e9 \x01\x02\x03', '6f1c1b0e-4a52-4c71-9a32-2a1f7f0c9e11', '2026-01-02 03:04:05.123456+00', '{"a": 1}'),
  (21, 2, 1, 3, 'eu', NULL, 'missing', '00000000-0000-0000-0000-000000000000', '2026-01-02 03:04:05+00', '{"b": 1}'),
  (22, 2, 1, 99, NULL, NULL, NULL, NULL, NULL, NULL),
  (23, 2, 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO loose_lines VALUES (1, 1, 5), (1, 3, 6), (2, 99, 1);
`

// The batch build splices shared objects into documents that are Build's,
// byte for byte (buildText compares them), for every kind of key and for
// references to rows that do not exist or that the relation's filter
// leaves out.
func TestPGSharedObjects(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, sharedSchema)
	m := mustBind(t, readCatalog(t, pg), sharedMapping)
	a := m.Aggregate("order")
	var paths []string
	for _, sh := range a.Shared {
		paths = append(paths, strings.TrimPrefix(sh.Node.Path, "aggregates.order.relations."))
	}
	// buyer is not inside an array, spec's key is jsonb, the loose
	// lines have no key (their elements are their sort key) and the
	// product's brand is inside a shared object: all inline.
	if got, want := strings.Join(paths, " "), "lines.relations.product lines.relations.product_title lines.relations.cheap lines.relations.warehouse lines.relations.label lines.relations.device lines.relations.slot"; got != want {
		t.Errorf("shared relations:\n%s\nwant\n%s", got, want)
	}
	docs := buildText(t, pg, a, rootIDs(t, pg, a, raws(`99`)))
	if len(docs) != 3 {
		t.Fatalf("built %d documents, want 3: %v", len(docs), docs)
	}
	var order2 struct {
		Lines []map[string]json.RawMessage `json:"lines"`
	}
	if err := json.Unmarshal([]byte(docs["[2]"]), &order2); err != nil {
		t.Fatalf("order 2 is not JSON: %v\n%s", err, docs["[2]"])
	}
	if len(order2.Lines) != 4 {
		t.Fatalf("order 2 has %d lines, want 4: %s", len(order2.Lines), docs["[2]"])
	}
	for i, want := range []map[string]string{
		{"product": `{"id":2,"sku":"S2","title":"dear \"ink\"","brand":{"name":"Zed"},"notes":[]}`, "cheap": "null",
			"label": `{"name":"tab\there \"q\" \\ é \u0001\u0002\u0003","color":"red"}`, "device": `{"id":"6f1c1b0e-4a52-4c71-9a32-2a1f7f0c9e11","model":"phone"}`},
		{"product": `{"id":3,"sku":"S3","title":"cup","brand":null,"notes":["white"]}`, "cheap": `{"id":3}`, "label": "null", "device": "null", "slot": "null", "warehouse": "null"},
		{"product": "null", "product_title": "null", "cheap": "null"},
		{"product": "null", "warehouse": "null", "label": "null"},
	} {
		for k, v := range want {
			if got := string(order2.Lines[i][k]); got != v {
				t.Errorf("order 2, line %d, %s = %s, want %s", i, k, got, v)
			}
		}
	}
}

// TestReuseSharedSet: a set reused for the next batch, of the same
// aggregate or another, holds nothing of the last one.
func TestReuseSharedSet(t *testing.T) {
	two := &Aggregate{Shared: []*Shared{{Node: &Node{}}, {Node: &Node{}}}}
	one := &Aggregate{Shared: []*Shared{{Node: &Node{}}}}
	s := two.NewSharedSet()
	for _, doc := range []string{`{"x":` + mark("0", "1") + `,"z":` + mark("1", `"a"`) + `}`, `{"x":` + mark("0", "2") + `}`} {
		if i, err := s.Add([]byte(doc)); err != nil || i < 0 {
			t.Fatalf("Add(%q) = %d, %v", doc, i, err)
		}
	}
	s.objs[0], s.objs[1] = [][]byte{[]byte(`"one"`), []byte(`"two"`)}, [][]byte{[]byte(`"a"`)}
	for _, a := range []*Aggregate{two, one} {
		s = a.ReuseSharedSet(s)
		if len(s.pos) != len(a.Shared) || len(s.keys) != len(a.Shared) || len(s.objs) != len(a.Shared) {
			t.Fatalf("reused for %d shared relations: %d/%d/%d", len(a.Shared), len(s.pos), len(s.keys), len(s.objs))
		}
		doc := `{"y":[` + mark("0", "2") + `,` + mark("0", "3") + `]}`
		i, err := s.Add([]byte(doc))
		if err != nil || i != 0 {
			t.Fatalf("Add after reuse = %d, %v; want document 0", i, err)
		}
		got, _ := json.Marshal(s.Keys(0))
		if string(got) != `[[2],[3]]` {
			t.Errorf("keys after reuse = %s, want [[2],[3]] (none of the last batch)", got)
		}
		if _, err := s.AppendSpliced(nil, i, nil); err == nil {
			t.Error("AppendSpliced after reuse found the last batch's objects")
		}
		s.objs[0] = [][]byte{[]byte(`"two"`), nil}
		if out, err := s.AppendSpliced(nil, i, nil); err != nil || string(out) != `{"y":["two",null]}` {
			t.Errorf("spliced after reuse = %s, %v", out, err)
		}
	}
}
