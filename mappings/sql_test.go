package mappings

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestBuildSQLGolden(t *testing.T) {
	m := mustBind(t, testCatalog(t, shopCatalog), productExample)
	golden(t, "sql/customer.sql", []byte(m.Aggregate("customer").Explain()))
}

// kindsCatalog has one table shape per relation kind.
const kindsCatalog = `
public.categories: id int pk; parent_id int ->public.categories.id; name text nn; idx(parent_id)
public.users: id int pk; name text; manager_id int ->public.users.id
public.profiles: user_id int pk ->public.users.id; bio text
public.messages: id int8 pk; sender_id int nn ->public.users.id; recipient_id int nn ->public.users.id; body text; sent_at tstz
public.shipments: order_no int; region text; carrier text; pk(order_no, region)
public.shipment_items: order_no int; region text; line int; sku text; pk(order_no, region, line); fk(order_no, region)->public.shipments(order_no, region)
billing.invoices: id uuid pk; user_id int nn ->public.users.id; amount numeric
billing.invoice_lines: invoice_id uuid ->billing.invoices.id; n int; text text; pk(invoice_id, n)
public.groups: id int pk; name text
public.memberships: user_id int ->public.users.id; group_id int ->public.groups.id; role text; pk(user_id, group_id)
public.nokey_notes: user_id int; note text
`

const kindsMapping = `version: 1
aggregates:
  category:
    table: categories
    relations:
      children:
        table: categories
        foreign_key: parent_id
        order_by: name
        relations:
          children: {table: categories, foreign_key: parent_id, order_by: name}
      parent: {table: categories, references: parent_id, columns: [id, name]}
  user:
    table: users
    columns: [id, name]
    relations:
      profile: {table: profiles, foreign_key: user_id, single: true}
      manager: {table: users, references: manager_id, columns: [id, name]}
      manager_name: {table: users, references: manager_id, value: name}
      sent: {table: messages, foreign_key: sender_id, order_by: sent_at desc nulls last}
      received: {table: messages, foreign_key: recipient_id, value: body}
      groups:
        table: groups
        through: {table: memberships, foreign_key: user_id, references: group_id}
      group_names:
        table: groups
        through: {table: memberships, foreign_key: user_id, references: group_id}
        value: name
      invoices:
        table: billing.invoices
        foreign_key: user_id
        relations:
          lines: {table: billing.invoice_lines, foreign_key: invoice_id}
      notes: {table: nokey_notes, foreign_key: user_id, value: note}
  shipment:
    table: shipments
    relations:
      items: {table: shipment_items, foreign_key: [order_no, region], columns: [line, sku]}
`

func TestKindsSQLGolden(t *testing.T) {
	m := mustBind(t, testCatalog(t, kindsCatalog), kindsMapping)
	for _, a := range m.Aggregates {
		golden(t, "sql/"+a.Name+".sql", []byte(a.Explain()))
	}
}

// A wide object is one concatenation: no function takes its 121 keys as
// arguments (PostgreSQL functions take at most 100).
func TestWideObjectSQL(t *testing.T) {
	var cols []string
	for i := 0; i < 120; i++ {
		cols = append(cols, fmt.Sprintf("c%03d text", i))
	}
	cat := testCatalog(t, "public.wide: id int pk; "+strings.Join(cols, "; "))
	m := mustBind(t, cat, "version: 1\naggregates:\n  wide: {table: wide}\n")
	sql := m.Aggregate("wide").Build.SQL
	if strings.Contains(sql, "json_build_object(") {
		t.Error("a wide object is built with json_build_object")
	}
	golden(t, "sql/wide.sql", []byte(sql+"\n"))
}

func TestQueryArgs(t *testing.T) {
	q := &Query{Params: []ParamSpec{{"a", "integer"}, {"b", "text"}}}
	raw := func(s ...string) []json.RawMessage {
		out := make([]json.RawMessage, len(s))
		for i, x := range s {
			out[i] = json.RawMessage(x)
		}
		return out
	}
	args, err := q.Args([][]json.RawMessage{raw(`7`, `"x\"y"`), raw(`12345678901234567890`, `null`), raw(`1.50`, `true`)})
	if err != nil {
		t.Fatal(err)
	}
	str := func(v []*string) []string {
		var out []string
		for _, p := range v {
			if p == nil {
				out = append(out, "<NULL>")
			} else {
				out = append(out, *p)
			}
		}
		return out
	}
	if got := str(args[0].([]*string)); !reflect.DeepEqual(got, []string{"7", "12345678901234567890", "1.50"}) {
		t.Errorf("$1 = %v", got)
	}
	if got := str(args[1].([]*string)); !reflect.DeepEqual(got, []string{`x"y`, "<NULL>", "true"}) {
		t.Errorf("$2 = %v", got)
	}
	for _, bad := range [][]json.RawMessage{raw(`1`), raw(`[1]`, `"a"`), raw(`{}`, `"a"`), raw(`nul`, `"a"`), raw(``, `"a"`)} {
		if _, err := q.Args([][]json.RawMessage{bad}); err == nil {
			t.Errorf("Args(%s): no error", bad)
		}
	}
}

func TestLiteral(t *testing.T) {
	for in, want := range map[string]string{"a": "'a'", "it's": "'it''s'", `a\b`: `E'a\\b'`, "x\x00y": "'xy'"} {
		if got := literal(in); got != want {
			t.Errorf("literal(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestRoutesAndBeforeImage(t *testing.T) {
	m := mustBind(t, testCatalog(t, shopCatalog), productExample)
	type row struct {
		Path, From string
		Direct     bool
	}
	var got []row
	for _, tn := range m.Tables() {
		for _, r := range m.RoutesFor(tn) {
			got = append(got, row{r.Path, tn.String() + "(" + strings.Join(r.From, ",") + ")", r.Lookup == nil})
		}
	}
	want := []row{
		{"aggregates.customer.relations.address", "public.addresses(id)", false},
		{"aggregates.customer.relations.tags.through", "public.customer_tags(customer_id)", true},
		{"aggregates.customer", "public.customers(id)", true},
		{"aggregates.customer.relations.orders.relations.lines", "public.order_lines(order_id)", false},
		{"aggregates.customer.relations.orders", "public.orders(customer_id)", true},
		{"aggregates.customer.relations.orders.relations.lines.relations.product", "public.products(id)", false},
		{"aggregates.customer.relations.tags", "public.tags(id)", false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("routes:\n%v\nwant\n%v", got, want)
	}
	before := map[string][]string{}
	for _, tn := range m.Tables() {
		before[tn.String()] = m.NeedsBeforeImage(tn)
	}
	wantBefore := map[string][]string{
		"public.addresses": {"id"}, "public.customer_tags": {"customer_id", "tag_id"}, "public.customers": {"id"},
		"public.order_lines": {"order_id"}, "public.orders": {"customer_id"}, "public.products": {"id"}, "public.tags": {"id"},
	}
	if !reflect.DeepEqual(before, wantBefore) {
		t.Errorf("NeedsBeforeImage = %v\nwant %v", before, wantBefore)
	}
	if w := m.RoutesFor(TableName{"public", "orders"})[0].Watch; !reflect.DeepEqual(w, []string{"id", "customer_id", "placed_at", "total"}) {
		t.Errorf("orders watch = %v", w)
	}
}

func TestIndexMappingGolden(t *testing.T) {
	m := mustBind(t, testCatalog(t, shopCatalog), productExample)
	a := m.Aggregate("customer")
	goldenJSON(t, "es/customer.json", map[string]any{"settings": a.IndexSettings(), "mappings": a.IndexMapping()})
	types := testCatalog(t, `public.typed: id int8 pk; s int2; i int; n numeric; f real; d float8; b bool; dt date; ts ts; tz tstz; j jsonb; u uuid; by bytea; ta text[]; ia int[]; m mood; iv interval; v varchar`)
	m = mustBind(t, types, "version: 1\naggregates:\n  typed:\n    table: typed\n    elasticsearch: {settings: {number_of_shards: 3, analysis: {}}, mappings: {dynamic: strict, properties: {v: {type: keyword}}}}\n")
	a = m.Aggregate("typed")
	goldenJSON(t, "es/typed.json", map[string]any{"settings": a.IndexSettings(), "mappings": a.IndexMapping()})
}

// jsonTextByDecoding is what jsonText computes, by encoding/json alone
// (after the same trim of surrounding space).
func jsonTextByDecoding(v json.RawMessage) (text string, null, ok bool) {
	var x any
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimSpace(v)))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil || dec.More() {
		return "", false, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false, false
	}
	switch x := x.(type) {
	case nil:
		return "", true, true
	case bool:
		return strconv.FormatBool(x), false, true
	case string:
		return x, false, true
	case json.Number:
		return x.String(), false, true
	}
	return "", false, false // arrays and objects are not key values
}

// TestJSONTextAgreesWithEncodingJSON checks jsonText's fast paths (plain
// strings, numbers) against encoding/json on the values that sit at their
// edges.
func TestJSONTextAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`0`, `-0`, `7`, `-12`, `1.5`, `1.50`, `1e9`, `1E+9`, `2.5e-3`, `12345678901234567890`, ` 42 `,
		`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x10`, `1_000`, `NaN`, `1 2`,
		`""`, `"a"`, `"x y"`, `"x\"y"`, `"a\\b"`, `"\u00e9"`, `"é"`, "\"\xff\"", "\"a\tb\"", `"a`, `"`, `"a"b"`, `"~"`, "\"\x7f\"",
		`null`, `nul`, `true`, `false`, `tru`, `[1]`, `{}`, ``, ` `,
	} {
		var text string
		null, err := jsonText(json.RawMessage(in), &text)
		want, wantNull, ok := jsonTextByDecoding(json.RawMessage(in))
		switch {
		case (err == nil) != ok:
			t.Errorf("jsonText(%q): err %v, encoding/json accepts it: %v", in, err, ok)
		case ok && (null != wantNull || (!null && text != want)):
			t.Errorf("jsonText(%q) = %q (null %v), want %q (null %v)", in, text, null, want, wantNull)
		}
	}
}

func FuzzJSONText(f *testing.F) {
	for _, s := range []string{`7`, `-1.5e3`, `"a"`, `"x\"y"`, `null`, `true`, `01`, "\"\xff\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var text string
		null, err := jsonText(json.RawMessage(in), &text)
		want, wantNull, ok := jsonTextByDecoding(json.RawMessage(in))
		if (err == nil) != ok {
			t.Fatalf("jsonText(%q): err %v, encoding/json accepts it: %v", in, err, ok)
		}
		if ok && (null != wantNull || (!null && text != want)) {
			t.Fatalf("jsonText(%q) = %q (null %v), want %q (null %v)", in, text, null, want, wantNull)
		}
	})
}
