package mappings

// Tests against a real PostgreSQL (e2e/infra/pg.sh up). They are skipped
// with -short, and fail under CI=true when the server is unreachable.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/decant-cdc/decant/internal/testenv"
)

// sampleDB creates a fresh database and runs testdata/<file>.
func sampleDB(t *testing.T, file string) *testenv.PG {
	t.Helper()
	pg := testenv.Postgres(t)
	sql, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, string(sql))
	return pg
}

func readCatalog(t *testing.T, pg *testenv.PG) *Catalog {
	t.Helper()
	cat, err := ReadCatalog(context.Background(), pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// rootIDs returns every id of a's root table, plus one that does not exist.
func rootIDs(t *testing.T, pg *testenv.PG, a *Aggregate, missing []json.RawMessage) [][]json.RawMessage {
	t.Helper()
	var sel []string
	for _, c := range a.ID {
		sel = append(sel, "to_jsonb("+ident(c)+")")
	}
	rows, err := pg.Pool.Query(context.Background(), "SELECT "+strings.Join(sel, ", ")+" FROM "+a.Table.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids [][]json.RawMessage
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		key := make([]json.RawMessage, len(vals))
		for i, v := range vals {
			key[i], _ = json.Marshal(v)
		}
		ids = append(ids, key)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return append(ids, missing)
}

// runQuery runs a generated query with keys as its arguments; what names
// it when it fails.
func runQuery(t *testing.T, pg *testenv.PG, q *Query, keys [][]json.RawMessage, what string) pgx.Rows {
	t.Helper()
	args, err := q.Args(keys)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pg.Pool.Query(context.Background(), q.SQL, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, q.SQL)
	}
	return rows
}

// build runs a's build statement and returns docs keyed by the id as a
// JSON array, decoded with exact numbers.
func build(t *testing.T, pg *testenv.PG, a *Aggregate, ids [][]json.RawMessage) map[string]any {
	t.Helper()
	docs := map[string]any{}
	for id, doc := range buildText(t, pg, a, ids) {
		docs[id] = testenv.DecodeExact(t, []byte(doc))
	}
	return docs
}

// buildText runs a's build statement and returns each document's text,
// keyed by the id as a JSON array. When a has shared relations it also
// runs Batch and the Shared statements, and fails unless their spliced
// documents are Build's, byte for byte.
func buildText(t *testing.T, pg *testenv.PG, a *Aggregate, ids [][]json.RawMessage) map[string]string {
	t.Helper()
	docs := runBuild(t, pg, a, a.Build, nil, ids)
	if !a.Spaced {
		// The build stage copies such documents as they are: they must
		// be compact.
		for id, doc := range docs {
			var c bytes.Buffer
			if err := json.Compact(&c, []byte(doc)); err != nil || c.String() != doc {
				t.Errorf("%s %s: Spaced is false, but the document is not compact JSON (%v):\n%s", a.Name, id, err, doc)
			}
		}
	}
	if a.Batch != nil {
		spliced := runBuild(t, pg, a, a.Batch, a.NewSharedSet(), ids)
		for id, doc := range docs {
			if spliced[id] != doc {
				t.Errorf("%s %s: spliced document differs from Build's:\n%q\nwant\n%q", a.Name, id, spliced[id], doc)
			}
		}
		if len(spliced) != len(docs) {
			t.Errorf("%s: Batch built %d documents, Build %d", a.Name, len(spliced), len(docs))
		}
	}
	return docs
}

// runBuild runs q (Build, or Batch with shared) in one transaction and
// returns each document's text, keyed by the id as a JSON array.
func runBuild(t *testing.T, pg *testenv.PG, a *Aggregate, q *Query, shared *SharedSet, ids [][]json.RawMessage) map[string]string {
	t.Helper()
	ctx := context.Background()
	tx, err := pg.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	args, err := q.Args(ids)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, q.SQL, args...)
	if err != nil {
		t.Fatalf("build %s: %v\n%s", a.Name, err, q.SQL)
	}
	docs := map[string][]byte{}
	marked := map[string]int{} // documents with markers: shared's index
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != len(a.ID)+1 {
			t.Fatalf("build returned %d columns, want %d", len(raw), len(a.ID)+1)
		}
		var key []string
		for _, r := range raw[:len(a.ID)] {
			key = append(key, string(jsonbText(r)))
		}
		id, doc := "["+strings.Join(key, ",")+"]", jsonbText(raw[len(a.ID)])
		if shared != nil {
			i, err := shared.Add(doc) // keeps a copy: doc is pgx's buffer
			if err != nil {
				t.Fatal(err)
			}
			if i >= 0 {
				marked[id] = i
				continue
			}
		}
		docs[id] = bytes.Clone(doc)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("build %s: %v", a.Name, err)
	}
	if shared != nil {
		// The Shared statements run in the transaction that built the
		// documents, as the build stage runs them.
		if err := shared.Fetch(ctx, tx); err != nil {
			t.Fatalf("shared objects of %s: %v", a.Name, err)
		}
	}
	out := make(map[string]string, len(docs)+len(marked))
	for id, doc := range docs {
		out[id] = string(doc)
	}
	for id, i := range marked {
		doc, err := shared.AppendSpliced(nil, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n := shared.SplicedLen(i); len(doc) != n {
			t.Errorf("%s %s: SplicedLen = %d, the spliced document has %d bytes", a.Name, id, n, len(doc))
		}
		out[id] = string(doc)
	}
	return out
}

// jsonbText strips the version byte of jsonb in binary format.
func jsonbText(b []byte) []byte {
	if len(b) > 0 && b[0] == 1 {
		return b[1:]
	}
	return b
}

func raws(vals ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(vals))
	for i, v := range vals {
		out[i] = json.RawMessage(v)
	}
	return out
}

// Acceptance 1: the PRODUCT.md §3 mapping builds the documents of
// testdata/docs/customer.json on a sample database.
func TestPGBuildProductExample(t *testing.T) {
	pg := sampleDB(t, "shop.sql")
	m := mustBind(t, readCatalog(t, pg), productExample)
	a := m.Aggregate("customer")
	docs := build(t, pg, a, rootIDs(t, pg, a, raws(`999`)))
	if _, ok := docs["[999]"]; ok {
		t.Error("a missing id returned a row")
	}
	goldenJSON(t, "docs/customer.json", docs)
}

// Acceptance 5: every relation kind, on testdata/kinds.sql.
func TestPGBuildRelationKinds(t *testing.T) {
	pg := sampleDB(t, "kinds.sql")
	cat := readCatalog(t, pg)
	m := mustBind(t, cat, kindsMapping)
	missing := map[string][]json.RawMessage{"category": raws(`99`), "user": raws(`99`), "shipment": raws(`7`, `"xx"`)}
	for _, a := range m.Aggregates {
		docs := build(t, pg, a, rootIDs(t, pg, a, missing[a.Name]))
		if len(docs) == 0 {
			t.Errorf("%s: no documents", a.Name)
		}
		goldenJSON(t, "docs/"+a.Name+".json", docs)
	}
	// The pure tests use a hand-written catalog; it must agree with the
	// real one on everything the SQL depends on.
	want := mustBind(t, testCatalog(t, kindsCatalog), kindsMapping)
	for _, a := range m.Aggregates {
		if got, w := a.Explain(), want.Aggregate(a.Name).Explain(); got != w {
			t.Errorf("%s: SQL from the real catalog differs from the test catalog:\n%s\n---\n%s", a.Name, got, w)
		}
	}
}

// lookup runs a route's lookup (or returns From as the id when direct) and
// returns the ids as sorted JSON arrays.
func lookupIDs(t *testing.T, pg *testenv.PG, r *Route, keys ...[]json.RawMessage) []string {
	t.Helper()
	var out []string
	if r.Lookup == nil {
		for _, k := range keys {
			b, _ := json.Marshal(k)
			out = append(out, string(b))
		}
		sort.Strings(out)
		return out
	}
	rows := runQuery(t, pg, r.Lookup, keys, r.Path)
	defer rows.Close()
	for rows.Next() {
		var key []string
		for _, v := range rows.RawValues() {
			key = append(key, string(jsonbText(v)))
		}
		out = append(out, "["+strings.Join(key, ",")+"]")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestPGRouteLookups(t *testing.T) {
	shop := sampleDB(t, "shop.sql")
	kinds := sampleDB(t, "kinds.sql")
	shopModel := mustBind(t, readCatalog(t, shop), productExample)
	kindsModel := mustBind(t, readCatalog(t, kinds), kindsMapping)
	tests := []struct {
		model *Model
		pg    *testenv.PG
		path  string
		keys  [][]json.RawMessage // From values: before or after images
		want  []string
	}{
		{shopModel, shop, "aggregates.customer", [][]json.RawMessage{raws(`1`)}, []string{"[1]"}},
		{shopModel, shop, "aggregates.customer.relations.orders", [][]json.RawMessage{raws(`1`), raws(`3`)}, []string{"[1]", "[3]"}},
		{shopModel, shop, "aggregates.customer.relations.orders.relations.lines", [][]json.RawMessage{raws(`1000`)}, []string{"[1]"}},
		{shopModel, shop, "aggregates.customer.relations.orders.relations.lines", [][]json.RawMessage{raws(`1000`), raws(`1002`), raws(`1001`), raws(`4242`)}, []string{"[1]", "[3]"}},
		{shopModel, shop, "aggregates.customer.relations.orders.relations.lines.relations.product", [][]json.RawMessage{raws(`100`)}, []string{"[1]"}},
		{shopModel, shop, "aggregates.customer.relations.orders.relations.lines.relations.product", [][]json.RawMessage{raws(`102`)}, nil},
		{shopModel, shop, "aggregates.customer.relations.address", [][]json.RawMessage{raws(`10`), raws(`11`)}, []string{"[1]", "[3]"}},
		{shopModel, shop, "aggregates.customer.relations.tags", [][]json.RawMessage{raws(`1`)}, []string{"[1]", "[3]"}},
		{shopModel, shop, "aggregates.customer.relations.tags", [][]json.RawMessage{raws(`3`), raws(`null`)}, nil},
		{shopModel, shop, "aggregates.customer.relations.tags.through", [][]json.RawMessage{raws(`3`)}, []string{"[3]"}},
		{kindsModel, kinds, "aggregates.category.relations.children", [][]json.RawMessage{raws(`1`)}, []string{"[1]"}},
		{kindsModel, kinds, "aggregates.category.relations.children.relations.children", [][]json.RawMessage{raws(`4`), raws(`3`)}, []string{"[1]", "[3]"}},
		{kindsModel, kinds, "aggregates.category.relations.parent", [][]json.RawMessage{raws(`1`)}, []string{"[2]", "[3]"}},
		{kindsModel, kinds, "aggregates.user.relations.manager", [][]json.RawMessage{raws(`1`)}, []string{"[2]", "[3]"}},
		{kindsModel, kinds, "aggregates.user.relations.groups", [][]json.RawMessage{raws(`2`)}, []string{"[1]", "[2]"}},
		{kindsModel, kinds, "aggregates.user.relations.invoices.relations.lines", [][]json.RawMessage{raws(`"00000000-0000-0000-0000-000000000001"`)}, []string{"[2]"}},
		{kindsModel, kinds, "aggregates.shipment.relations.items", [][]json.RawMessage{raws(`7`, `"eu"`)}, []string{`[7,"eu"]`}},
	}
	for _, tt := range tests {
		var route *Route
		for _, a := range tt.model.Aggregates {
			for _, r := range a.Routes {
				if r.Path == tt.path {
					route = r
				}
			}
		}
		if route == nil {
			t.Errorf("no route %s", tt.path)
			continue
		}
		if got := lookupIDs(t, tt.pg, route, tt.keys...); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s %s: ids %v, want %v", tt.path, tt.keys, got, tt.want)
		}
	}
}

func TestPGReadCatalog(t *testing.T) {
	pg := sampleDB(t, "kinds.sql")
	pg.Exec(t, `ALTER TABLE messages REPLICA IDENTITY FULL;
CREATE UNIQUE INDEX categories_name_key ON categories (name);
ALTER TABLE categories REPLICA IDENTITY USING INDEX categories_name_key;
ALTER TABLE groups REPLICA IDENTITY NOTHING;
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TYPE mood AS ENUM ('ok', 'meh');
CREATE TABLE typed (id posint PRIMARY KEY, m mood, tags text[], v varchar(20), n numeric(10,2));`)
	cat := readCatalog(t, pg)
	for _, tb := range cat.Tables {
		for _, c := range tb.Columns {
			if c.TypeOID >= 16384 { // user types get a new OID in every database
				c.TypeOID = 0
			}
		}
	}
	goldenJSON(t, "catalog/kinds.json", cat)
}

// Documents are built with json_build_object, which embeds json column
// text verbatim: json columns must still come out as to_jsonb gives them
// (duplicate keys dropped), like every other value.
func TestPGBuildJSONColumnsAsToJSONB(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, `CREATE TABLE docs (id int PRIMARY KEY, j json, ja json[], jb jsonb, n numeric, t timestamptz, tags text[]);
		INSERT INTO docs VALUES (1, '{"a" : 1, "a" : 2,  "b":[1,  2]}', ARRAY['{"x":1,"x":3}'::json, 'null'], '{"c": 1.50}', 1.50, '2026-11-30 01:02:03.5+00', '{p,NULL,"b c"}'),
		                        (2, NULL, NULL, NULL, 'NaN', NULL, '{}')`)
	m := mustBind(t, readCatalog(t, pg), "version: 1\naggregates:\n  doc: {table: docs}\n")
	a := m.Aggregate("doc")
	docs := build(t, pg, a, [][]json.RawMessage{raws(`1`), raws(`2`)})
	for _, id := range []string{"1", "2"} {
		var want []byte
		if err := pg.Pool.QueryRow(context.Background(), `SELECT to_jsonb(d)::text FROM docs d WHERE id = $1`, id).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got, w := docs["["+id+"]"], testenv.DecodeExact(t, want); !reflect.DeepEqual(got, w) {
			t.Errorf("doc %s = %v, want to_jsonb's %v", id, got, w)
		}
	}
	// Decoding keeps the last of duplicate keys, as jsonb does; the text
	// itself must not have them (Elasticsearch refuses such a source).
	args, err := a.Build.Args([][]json.RawMessage{raws(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	var id, doc []byte
	if err := pg.Pool.QueryRow(context.Background(), a.Build.SQL, args...).Scan(&id, &doc); err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(doc), `"a"`) != 1 || strings.Count(string(doc), `"x"`) != 1 {
		t.Errorf("document has duplicate keys: %s", doc)
	}
	if !a.Spaced {
		t.Error("a document with json and jsonb values is not Spaced: the build stage would not compact it")
	}
}

// Documents are concatenated as text (object in sql.go), each value
// encoded by to_json or, for integers and booleans, by its text. Every
// value must come out exactly as PostgreSQL's own JSON encoding writes it
// (to_json of the row, which json_build_object shares): every type, NULL,
// NaN and infinities, strings that need escapes, and keys that do; a
// value relation's NULL elements, a missing many-to-one, an empty array,
// and an object wider than a function's 100 arguments.
func TestPGBuildValuesAsToJSON(t *testing.T) {
	pg := testenv.Postgres(t)
	var wide []string
	for i := 0; i < 120; i++ {
		wide = append(wide, fmt.Sprintf("w%03d int DEFAULT %d", i, i))
	}
	pg.Exec(t, `CREATE TYPE mood AS ENUM ('sad', 'ok');
		CREATE TYPE pair AS (a int, b text);
		CREATE DOMAIN posint AS int CHECK (VALUE > 0);
		CREATE DOMAIN flag AS boolean;
		CREATE DOMAIN label AS text;
		CREATE TABLE typed (id int PRIMARY KEY, i2 smallint, i8 bigint NOT NULL DEFAULT -9223372036854775808, n numeric, n2 numeric(10,2),
			f4 real, f8 double precision, b boolean, t text, "we""ird key\u00e9" varchar(5), c char(4), ts timestamptz, tsl timestamp,
			d date, tm time, tmz timetz, iv interval, u uuid, by bytea, ip inet, ia int[], ta text[], m2 int[][], e mood, pi posint,
			fl flag, lb label, cp pair, mo money, `+strings.Join(wide, ", ")+`);
		INSERT INTO typed (id, i2, n, n2, f4, f8, b, t, "we""ird key\u00e9", c, ts, tsl, d, tm, tmz, iv, u, by, ip, ia, ta, m2, e, pi, fl, lb, cp, mo) VALUES
			(1, -32768, 1.50, 2, 1.5, 1e300, true, E'q"uo\\te\nnew\tline\x01 \u00e9 \U0001F600 </script>', 'ab', 'x', '2026-11-30 01:02:03.5+00',
			 '2026-11-30 01:02:03', '2026-11-30', '01:02:03', '01:02:03+02', '1 day 2 hours', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
			 '\xdead', '10.0.0.1/8', '{1,NULL,3}', '{"a b",NULL,"c\"d"}', '{{1,2},{3,4}}', 'ok', 7, false, 'lbl', ROW(1, 'x"y'), 12.5),
			(2, NULL, 'NaN', NULL, 'NaN', '-Infinity', NULL, NULL, NULL, NULL, NULL, NULL, 'infinity', NULL, NULL, NULL, NULL, NULL, NULL,
			 '{}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
			(3, 0, 'Infinity', -0.01, 'Infinity', -0, false, '', '', '', '-infinity', '-infinity', '-infinity', '24:00', '00:00+00',
			 '-1 mons', NULL, '', '::1', '{NULL}', '{""}', '{}', 'sad', 1, true, '', ROW(NULL, NULL), -1);
		CREATE TABLE notes (id int PRIMARY KEY, typed_id int REFERENCES typed(id), body text);
		INSERT INTO notes VALUES (1, 1, 'first'), (2, 1, NULL), (3, 1, 'th"ird'), (4, 2, NULL);
		CREATE TABLE refs (id int PRIMARY KEY, target_id int);
		INSERT INTO refs VALUES (1, 2), (2, 99), (3, NULL);`)
	m := mustBind(t, readCatalog(t, pg), `version: 1
aggregates:
  typed: {table: typed}
  plain:
    table: typed
    columns: [id, i2, i8, n, n2, f4, f8, b, t, "we\"ird key\\u00e9", c, ts, tsl, d, tm, tmz, iv, u, by, ip, ia, ta, m2, e, pi, fl, lb, mo]
  noted:
    table: typed
    columns: [id]
    fields:
      "lit\"eral": "'a literal'"
      sum: "i2 + 1"
      nothing: "NULL"
      note_count: {count: notes}
      last_note: {max: notes.body}
    relations:
      notes: {table: notes, foreign_key: typed_id, value: body}
      "objects \\ with \"quotes\"": {table: notes, foreign_key: typed_id, columns: [id, body]}
  ref:
    table: refs
    relations:
      target: {table: typed, references: target_id, columns: [id, b]}
`)
	ids := [][]json.RawMessage{raws(`1`), raws(`2`), raws(`3`)}
	// Every type but the composite is printed without whitespace:
	// buildText checks that plain's documents are compact as built.
	if a := m.Aggregate("plain"); a.Spaced {
		t.Error("plain: Spaced, but no value of it is json, jsonb, a composite or an expression")
	} else {
		buildText(t, pg, a, ids)
	}
	for _, name := range []string{"typed", "noted"} {
		if !m.Aggregate(name).Spaced {
			t.Errorf("%s: not Spaced, but it has a composite or an expression", name)
		}
	}
	docs := buildText(t, pg, m.Aggregate("typed"), ids)
	for _, id := range []string{"1", "2", "3"} {
		var want string
		if err := pg.Pool.QueryRow(context.Background(), `SELECT to_json(r)::text FROM typed r WHERE id = $1`, id).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := docs["["+id+"]"]; got != want {
			t.Errorf("typed %s:\n got %s\nwant %s (to_json of the row)", id, got, want)
		}
	}
	want := map[string]string{
		"[1]": `{"id":1,"lit\"eral":"a literal","sum":-32767,"nothing":null,"note_count":3,"last_note":"th\"ird","notes":["first",null,"th\"ird"],` +
			`"objects \\ with \"quotes\"":[{"id":1,"body":"first"},{"id":2,"body":null},{"id":3,"body":"th\"ird"}]}`,
		"[2]": `{"id":2,"lit\"eral":"a literal","sum":null,"nothing":null,"note_count":1,"last_note":null,"notes":[null],` +
			`"objects \\ with \"quotes\"":[{"id":4,"body":null}]}`,
		"[3]": `{"id":3,"lit\"eral":"a literal","sum":1,"nothing":null,"note_count":0,"last_note":null,"notes":[],"objects \\ with \"quotes\"":[]}`,
	}
	if got := buildText(t, pg, m.Aggregate("noted"), ids); !reflect.DeepEqual(got, want) {
		t.Errorf("noted:\n got %v\nwant %v", got, want)
	}
	want = map[string]string{
		"[1]": `{"id":1,"target_id":2,"target":{"id":2,"b":null}}`,
		"[2]": `{"id":2,"target_id":99,"target":null}`,
		"[3]": `{"id":3,"target_id":null,"target":null}`,
	}
	if got := buildText(t, pg, m.Aggregate("ref"), ids); !reflect.DeepEqual(got, want) {
		t.Errorf("ref:\n got %v\nwant %v", got, want)
	}
}

// TestPGFilters (issue 18): where: on the root keeps a root row's document
// only while it matches (an id that does not match comes back without a
// row, as a missing one does); on relations (one-to-many and
// many-to-many, whose join table has a column of the same name) it keeps
// the matching children; the routes watch every column of a filtered
// table; CheckFilters refuses a filter PostgreSQL refuses, at its
// file:line:column with PostgreSQL's message.
func TestPGFilters(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, `CREATE TABLE posts (id int PRIMARY KEY, title text, published bool NOT NULL, note text);
		CREATE TABLE comments (id int PRIMARY KEY, post_id int REFERENCES posts(id), body text, hidden bool NOT NULL);
		CREATE TABLE labels (id int PRIMARY KEY, name text, hidden bool NOT NULL);
		CREATE TABLE post_labels (post_id int REFERENCES posts(id), label_id int REFERENCES labels(id), hidden bool, PRIMARY KEY (post_id, label_id));
		INSERT INTO posts VALUES (1, 'one', true, 'x'), (2, 'two', false, 'y');
		INSERT INTO comments VALUES (10, 1, 'shown', false), (11, 1, 'hidden', true);
		INSERT INTO labels VALUES (20, 'go', false), (21, 'secret', true);
		INSERT INTO post_labels VALUES (1, 20, true), (1, 21, false);`)
	m := mustBind(t, readCatalog(t, pg), `version: 1
aggregates:
  post:
    table: posts
    columns: [id, title]
    where: published
    relations:
      comments: {table: comments, foreign_key: post_id, columns: [body], where: NOT hidden}
      labels:
        table: labels
        through: {table: post_labels, foreign_key: post_id, references: label_id}
        value: name
        where: NOT hidden
`)
	a := m.Aggregate("post")
	if err := CheckSQL(context.Background(), pg.Pool, m); err != nil {
		t.Fatalf("CheckFilters on good filters: %v", err)
	}
	docs := build(t, pg, a, [][]json.RawMessage{raws(`1`), raws(`2`)})
	got, _ := json.Marshal(docs)
	if want := `{"[1]":{"comments":[{"body":"shown"}],"id":1,"labels":["go"],"title":"one"}}`; string(got) != want {
		t.Errorf("documents = %s\nwant %s (post 2 unpublished: no row)", got, want)
	}
	// Roots: the ids with a document — post 2 is filtered out, 3 does not exist.
	args, err := a.Roots.Args([][]json.RawMessage{raws(`1`), raws(`2`), raws(`3`)})
	if err != nil {
		t.Fatal(err)
	}
	var roots []string
	rows, err := pg.Pool.Query(context.Background(), a.Roots.SQL, args...)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		roots = append(roots, string(id))
	}
	if rows.Close(); rows.Err() != nil || strings.Join(roots, ",") != "1" {
		t.Errorf("Roots of 1, 2, 3 = %v (%v), want [1]", roots, rows.Err())
	}
	for _, r := range m.RoutesFor(TableName{"public", "posts"}) {
		if strings.Join(r.Watch, ",") != "id,title,published,note" {
			t.Errorf("route %s watches %v, want every column of the filtered table", r.Path, r.Watch)
		}
	}

	set := mustLoad(t, File{Name: "bad.yaml", Data: []byte(`version: 1
aggregates:
  post:
    table: posts
    where: publishd AND title <> ''
`)})
	bad, err := Bind(set, readCatalog(t, pg))
	if err != nil {
		t.Fatal(err)
	}
	err = CheckSQL(context.Background(), pg.Pool, bad)
	wantMsg := `bad.yaml:5:12: aggregates.post.where: where: PostgreSQL refuses the filter on public.posts: column "publishd" does not exist (at character 1 of the filter)`
	if err == nil || !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("CheckFilters on a misspelt column: %v\nwant %s", err, wantMsg)
	}
}

// TestPGFields (issue 18): computed keys — an expression over the node's
// row, and count / max / sum over a relation (the relation's filter
// applies to them too) — built in the one statement, typed for
// Elasticsearch from PostgreSQL's own types, watched (an expression's
// table whole, an aggregated column on the relation's route), and
// refused at their file:line:column when PostgreSQL refuses them.
func TestPGFields(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, `CREATE TABLE people (id int PRIMARY KEY, first_name text, last_name text, cents int);
		CREATE TABLE orders (id int PRIMARY KEY, person_id int REFERENCES people(id), total numeric(10,2), placed_at timestamptz, status text, note text);
		INSERT INTO people VALUES (1, 'Ada', 'Lovelace', 150), (2, 'Bob', 'Ross', NULL);
		INSERT INTO orders VALUES (10, 1, 5.50, '2026-01-01T00:00:00Z', 'ok', 'n'), (11, 1, 4.25, '2026-02-01T00:00:00Z', 'ok', 'n'),
		                          (12, 1, 100, '2026-03-01T00:00:00Z', 'cancelled', 'n');`)
	m := mustBind(t, readCatalog(t, pg), `version: 1
aggregates:
  person:
    table: people
    columns: [id]
    fields:
      full_name: "first_name || ' ' || last_name"
      euros: "cents / 100.0"
      order_count: {count: orders}
      last_order_at: {max: orders.placed_at}
      spent: {sum: orders.total}
    relations:
      orders: {table: orders, foreign_key: person_id, columns: [id], where: "status <> 'cancelled'"}
`)
	if err := CheckSQL(context.Background(), pg.Pool, m); err != nil {
		t.Fatal(err)
	}
	a := m.Aggregate("person")
	docs := build(t, pg, a, [][]json.RawMessage{raws(`1`), raws(`2`)})
	got, _ := json.Marshal(docs)
	want := `{"[1]":{"euros":1.5000000000000000,"full_name":"Ada Lovelace","id":1,"last_order_at":"2026-02-01T00:00:00+00:00","order_count":2,"orders":[{"id":10},{"id":11}],"spent":9.75},` +
		`"[2]":{"euros":null,"full_name":"Bob Ross","id":2,"last_order_at":null,"order_count":0,"orders":[],"spent":null}}`
	if string(got) != want {
		t.Errorf("documents\n%s\nwant\n%s", got, want)
	}
	props := a.IndexMapping()["properties"].(map[string]any)
	for key, typ := range map[string]string{"full_name": "text", "euros": "double", "order_count": "long", "last_order_at": "date", "spent": "double"} {
		if p, _ := props[key].(map[string]any); p == nil || p["type"] != typ {
			t.Errorf("index mapping of %s = %v, want type %s", key, props[key], typ)
		}
	}
	for _, r := range m.RoutesFor(TableName{"public", "people"}) {
		if strings.Join(r.Watch, ",") != "id,first_name,last_name,cents" {
			t.Errorf("route %s watches %v, want every column (an expression reads them)", r.Path, r.Watch)
		}
	}
	for _, r := range m.RoutesFor(TableName{"public", "orders"}) {
		for _, c := range []string{"placed_at", "total", "status"} {
			if !slices.Contains(r.Watch, c) {
				t.Errorf("route %s watches %v: %s is missing (aggregated, or read by the filter)", r.Path, r.Watch, c)
			}
		}
	}

	set := mustLoad(t, File{Name: "bad.yaml", Data: []byte(`version: 1
aggregates:
  person:
    table: people
    fields:
      full: "first_name || ' ' || lastname"
`)})
	bad, err := Bind(set, readCatalog(t, pg))
	if err != nil {
		t.Fatal(err)
	}
	err = CheckSQL(context.Background(), pg.Pool, bad)
	wantMsg := `bad.yaml:6:13: aggregates.person.fields.full: fields.full: PostgreSQL refuses the expression on public.people: column "lastname" does not exist (at character 22 of the expression)`
	if err == nil || !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("CheckSQL on a misspelt column: %v\nwant %s", err, wantMsg)
	}
}

// TestPGInitExampleApplies (issue 18): the filter and computed fields that
// decant init's header shows as an example, taken from the generated
// text itself, are added to its customers aggregate on a shop whose
// customers have the columns they name; the result binds, PostgreSQL
// accepts the SQL (CheckSQL), and the documents are those the example
// says: soft-deleted customers have none, full_name and order_count are
// computed.
func TestPGInitExampleApplies(t *testing.T) {
	pg := sampleDB(t, "shop.sql")
	pg.Exec(t, `ALTER TABLE customers ADD deleted_at timestamptz, ADD first_name text, ADD last_name text;
UPDATE customers SET first_name = 'F' || id, last_name = 'L' || id;
UPDATE customers SET deleted_at = now() WHERE id = (SELECT min(id) FROM customers)`)
	cat := readCatalog(t, pg)
	out, err := Init(cat, InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The example: the comment lines after "e.g.:", indented.
	var example []string
	lines := strings.Split(string(out), "\n")
	for i, l := range lines {
		if strings.HasSuffix(l, "e.g.:") {
			for _, e := range lines[i+1:] {
				if !strings.HasPrefix(e, "#   ") {
					break
				}
				example = append(example, strings.TrimPrefix(e, "#   "))
			}
		}
	}
	if len(example) != 2 || !strings.HasPrefix(example[0], "where:") || !strings.HasPrefix(example[1], "fields:") {
		t.Fatalf("decant init's example is not the where: and fields: lines this test applies: %q", example)
	}
	const at = "  customers:\n    table: customers\n"
	if !strings.Contains(string(out), at) {
		t.Fatalf("decant init wrote no customers aggregate:\n%s", out)
	}
	applied := strings.Replace(string(out), at, at+"    "+example[0]+"\n    "+example[1]+"\n", 1)
	m := mustBind(t, cat, applied)
	if err := CheckSQL(context.Background(), pg.Pool, m); err != nil {
		t.Fatalf("CheckSQL on decant init's example: %v\n%s", err, applied)
	}
	a := m.Aggregate("customers")
	docs := build(t, pg, a, rootIDs(t, pg, a, raws("-1")))
	for id, d := range docs {
		if d == nil { // a root the filter leaves out is built as no document
			delete(docs, id)
		}
	}
	var want struct{ live, deleted int }
	if err := pg.Pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE deleted_at IS NULL), count(*) FILTER (WHERE deleted_at IS NOT NULL) FROM customers`).Scan(&want.live, &want.deleted); err != nil {
		t.Fatal(err)
	}
	if len(docs) != want.live || want.deleted == 0 {
		t.Fatalf("%d documents, want %d (the %d soft-deleted customers have none): %v", len(docs), want.live, want.deleted, docs)
	}
	for id, d := range docs {
		doc := d.(map[string]any)
		var orders int
		if err := pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE customer_id = ($1::jsonb ->> 0)::int`, id).Scan(&orders); err != nil {
			t.Fatal(err)
		}
		wantName := "F" + fmt.Sprint(doc["id"]) + " L" + fmt.Sprint(doc["id"])
		if doc["full_name"] != wantName || fmt.Sprint(doc["order_count"]) != fmt.Sprint(orders) {
			t.Errorf("document %s: full_name %v, order_count %v; want %q, %d", id, doc["full_name"], doc["order_count"], wantName, orders)
		}
	}
}
