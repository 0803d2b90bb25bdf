package mappings

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestLoadProductExample(t *testing.T) {
	set := mustLoad(t, File{Name: "shop.yaml", Data: []byte(productExample)})
	if got := set.Names(); len(got) != 1 || got[0] != "customer" {
		t.Fatalf("Names() = %v, want [customer]", got)
	}
	m := mustBind(t, testCatalog(t, shopCatalog), productExample)
	a := m.Aggregate("customer")
	if a == nil {
		t.Fatal("no aggregate customer")
	}
	if a.Index != "customers" || a.Table.String() != "public.customers" || strings.Join(a.ID, ",") != "id" {
		t.Errorf("aggregate = %+v", a)
	}
	kinds := map[string]Kind{}
	var walk func(n *Node)
	walk = func(n *Node) {
		kinds[n.Path] = n.Kind
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(a.Root)
	want := map[string]Kind{
		"aggregates.customer":                                                    Root,
		"aggregates.customer.relations.orders":                                   OneToMany,
		"aggregates.customer.relations.orders.relations.lines":                   OneToMany,
		"aggregates.customer.relations.orders.relations.lines.relations.product": ManyToOne,
		"aggregates.customer.relations.address":                                  ManyToOne,
		"aggregates.customer.relations.tags":                                     ManyToMany,
	}
	for p, k := range want {
		if kinds[p] != k {
			t.Errorf("%s: kind %v, want %v", p, kinds[p], k)
		}
	}
	if len(kinds) != len(want) {
		t.Errorf("nodes: %v", kinds)
	}
}

// A valid base that the invalid cases below break in one place each.
func TestLoadErrors(t *testing.T) {
	cat := testCatalog(t, shopCatalog+`
public.categories: id int pk; parent_id int ->public.categories.id; name text
sales.invoices: id int pk; customer_ref text; number text
public.lines2: order_id int; line_no int; pk(order_id, line_no)
public.nokey: a int; b text
`)
	tests := []struct {
		name string
		yaml string
		want []string // every error, in order
	}{
		{"empty file", ``,
			[]string{"m.yaml:1:1: file is empty; a mapping file starts with `version: 1` and `aggregates:`"}},
		{"invalid yaml", "version: 1\naggregates:\n  a: [\n",
			[]string{"m.yaml:3: invalid YAML: did not find expected node content"}},
		{"not a mapping", "- a\n- b\n",
			[]string{"m.yaml:1:1: expected a mapping of keys, got a list"}},
		{"missing version", "aggregates:\n  a: {table: customers}\n",
			[]string{"m.yaml:1:1: missing `version: 1` at the top of the file"}},
		{"version 2", "version: 2\naggregates:\n  a: {table: customers}\n",
			[]string{"m.yaml:1:10: version: unsupported version 2; this decant reads version 1"}},
		{"version string", "version: \"1\"\naggregates:\n  a: {table: customers}\n",
			[]string{`m.yaml:1:10: version: expected a whole number, got "1"`}},
		{"unknown top key", "version: 1\nschemas: public\naggregates:\n  a: {table: customers}\n",
			[]string{`m.yaml:2:1: schemas: unknown key "schemas"; did you mean "schema"?`}},
		{"missing aggregates", "version: 1\n",
			[]string{"m.yaml:1:1: missing `aggregates:`; define at least one aggregate"}},
		{"empty aggregates", "version: 1\naggregates: {}\n",
			[]string{"m.yaml:2:13: aggregates: no aggregates defined"}},
		{"empty where", "version: 1\naggregates:\n  a: {table: customers, where: \"  \"}\n",
			[]string{"m.yaml:3:32: aggregates.a.where: where is empty: write a SQL boolean over the table's columns, e.g. deleted_at IS NULL, or leave the key out"}},
		{"where with a semicolon", "version: 1\naggregates:\n  a:\n    table: customers\n    relations:\n      orders: {table: orders, foreign_key: customer_id, where: \"true; DROP TABLE orders\"}\n",
			[]string{"m.yaml:6:64: aggregates.a.relations.orders.where: where must be one SQL expression: remove the ';'"}},
		{"field with an unknown function", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {n: {cnt: orders}}\n    relations:\n      orders: {table: orders, foreign_key: customer_id}\n",
			[]string{`m.yaml:5:18: aggregates.a.fields.n.cnt: unknown function "cnt": use one of count, max, min, sum, avg; did you mean "count"?`}},
		{"count of a column", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {n: {count: orders.id}}\n    relations:\n      orders: {table: orders, foreign_key: customer_id}\n",
			[]string{"m.yaml:5:25: aggregates.a.fields.n.count: count takes a relation, not a column: {count: orders}"}},
		{"max of a relation", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {last: {max: orders}}\n    relations:\n      orders: {table: orders, foreign_key: customer_id}\n",
			[]string{"m.yaml:5:26: aggregates.a.fields.last.max: max takes a relation's column: {max: orders.<column>}"}},
		{"field of an unknown relation", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {n: {count: order}}\n    relations:\n      orders: {table: orders, foreign_key: customer_id}\n",
			[]string{`m.yaml:5:25: aggregates.a.fields.n.count: count: no relation "order" in this object; a field reads one of the object's relations; did you mean "orders"?`}},
		{"field of an unknown column", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {last: {max: orders.placed}}\n    relations:\n      orders: {table: orders, foreign_key: customer_id}\n",
			[]string{`m.yaml:5:26: aggregates.a.fields.last.max: max: column "placed" does not exist in table public.orders; did you mean "placed_at"?`}},
		{"field clashing with a column", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {name: \"upper(name)\"}\n",
			[]string{`m.yaml:5:20: aggregates.a.fields.name: field "name" clashes with column "name" in the same object; rename one of them`}},
		{"empty field", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {n: \"\"}\n",
			[]string{"m.yaml:5:17: aggregates.a.fields.n: the expression is empty: write a SQL expression over the table's columns, e.g. first_name || ' ' || last_name"}},
		{"field that is a list", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {n: [a]}\n",
			[]string{"m.yaml:5:17: aggregates.a.fields.n: expected a SQL expression, or one of count, max, min, sum, avg with a relation, e.g. {count: orders} or {max: orders.placed_at}"}},
		{"fields on a value", "version: 1\naggregates:\n  a:\n    table: customers\n    relations:\n      tags:\n        table: tags\n        through: {table: customer_tags, foreign_key: customer_id, references: tag_id}\n        value: name\n        fields: {n: \"upper(name)\"}\n",
			[]string{`m.yaml:10:21: aggregates.a.relations.tags.fields.n: fields make an object, but tags is the single value of column "name": drop value or the fields`}},
		{"where a number", "version: 1\naggregates:\n  a: {table: customers, where: 42}\n",
			[]string{`m.yaml:3:32: aggregates.a.where: expected a string, got a number; quote it: "42"`}},
		{"field named with $", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {$n: \"1\"}\n",
			[]string{`m.yaml:5:14: aggregates.a.fields.$n: key "$n" must not start with "$" (reserved)`}},
		{"field with two functions", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {n: {count: orders, max: orders.id}}\n    relations:\n      orders: {table: orders, foreign_key: customer_id}\n",
			[]string{"m.yaml:5:17: aggregates.a.fields.n: expected a SQL expression, or one of count, max, min, sum, avg with a relation, e.g. {count: orders} or {max: orders.placed_at}"}},
		{"field clashing with a relation", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {orders: {count: orders}}\n    relations:\n      orders: {table: orders, foreign_key: customer_id}\n",
			[]string{`m.yaml:5:30: aggregates.a.fields.orders.count: field "orders" clashes with relation "orders" in the same object; rename one of them`}},
		{"field with a semicolon", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: {n: \"1; SELECT 2\"}\n",
			[]string{"m.yaml:5:17: aggregates.a.fields.n: a field must be one SQL expression: remove the ';'"}},
		{"fields as a list", "version: 1\naggregates:\n  a:\n    table: customers\n    fields: [n]\n",
			[]string{"m.yaml:5:13: aggregates.a.fields: expected a mapping of keys, got a list"}},
		{"where not a string", "version: 1\naggregates:\n  a: {table: customers, where: [a, b]}\n",
			[]string{"m.yaml:3:32: aggregates.a.where: expected a string, got a list"}},
		{"bad aggregate name", "version: 1\naggregates:\n  Customer:\n    table: customers\n",
			[]string{`m.yaml:3:3: aggregates.Customer: aggregate name "Customer" is not valid: it names Kafka topics and the Elasticsearch index, so use lower-case letters, digits, '_' and '-', starting with a letter or '_'`}},
		{"aggregate not a mapping", "version: 1\naggregates:\n  customer: customers\n",
			[]string{`m.yaml:3:13: aggregates.customer: expected a mapping of keys, got "customers"`}},
		{"missing table", "version: 1\naggregates:\n  customer:\n    id: id\n",
			[]string{"m.yaml:3:3: aggregates.customer: missing `table:`, the table this aggregate reads"}},
		{"unknown aggregate key", "version: 1\naggregates:\n  customer:\n    table: customers\n    colums: [id]\n",
			[]string{`m.yaml:5:5: aggregates.customer.colums: unknown key "colums"; did you mean "columns"?`}},
		{"misspelt foreign_key", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      orders:\n        table: orders\n        foriegn_key: customer_id\n",
			[]string{
				`m.yaml:6:7: aggregates.customer.relations.orders: relation "orders" does not say how to join: add foreign_key (the orders rows point at the parent: one-to-many), references (the parent row points at one orders row: many-to-one) or through (a join table: many-to-many)`,
				`m.yaml:8:9: aggregates.customer.relations.orders.foriegn_key: unknown key "foriegn_key"; did you mean "foreign_key"?`,
			}},
		{"table is a number", "version: 1\naggregates:\n  customer:\n    table: 12\n",
			[]string{
				"m.yaml:3:3: aggregates.customer: missing `table:`, the table this aggregate reads",
				`m.yaml:4:12: aggregates.customer.table: expected a string, got a number; quote it: "12"`,
			}},
		{"duplicate key", "version: 1\naggregates:\n  customer:\n    table: customers\n    table: orders\n",
			[]string{`m.yaml:5:5: aggregates.customer.table: "table" is given twice`}},
		{"columns not a list", "version: 1\naggregates:\n  customer:\n    table: customers\n    columns: {id: 1}\n",
			[]string{"m.yaml:5:14: aggregates.customer.columns: expected a column name or a list of column names, got a mapping"}},
		{"column listed twice", "version: 1\naggregates:\n  customer:\n    table: customers\n    columns: [id, name, id]\n",
			[]string{`m.yaml:5:25: aggregates.customer.columns.2: column "id" is listed twice`}},
		{"empty id", "version: 1\naggregates:\n  customer:\n    table: customers\n    id: []\n",
			[]string{"m.yaml:5:9: aggregates.customer.id: needs at least one column"}},
		{"both foreign_key and references", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      address:\n        table: addresses\n        foreign_key: customer_id\n        references: address_id\n",
			[]string{"m.yaml:6:7: aggregates.customer.relations.address: ambiguous join: foreign_key and references are given; keep one (foreign_key: child points at parent, references: parent points at child, through: join table)"}},
		{"through without keys", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      tags:\n        table: tags\n        through: {table: customer_tags}\n",
			[]string{
				"m.yaml:8:9: aggregates.customer.relations.tags.through: through needs `foreign_key:`, the join table's columns that point at the parent row",
				"m.yaml:8:9: aggregates.customer.relations.tags.through: through needs `references:`, the join table's columns that point at the tags rows",
			}},
		{"value with relations", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      tags:\n        table: tags\n        through: {table: customer_tags, foreign_key: customer_id, references: tag_id}\n        value: name\n        relations:\n          x: {table: tags, foreign_key: id}\n",
			[]string{"m.yaml:9:16: aggregates.customer.relations.tags.value: value gives scalars, so this relation cannot have relations; remove value or relations"}},
		{"value with columns", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      tags:\n        table: tags\n        through: {table: customer_tags, foreign_key: customer_id, references: tag_id}\n        value: name\n        columns: [name]\n",
			[]string{"m.yaml:9:16: aggregates.customer.relations.tags.value: value and columns are exclusive: value gives one column's values, columns gives objects"}},
		{"single on references", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      address:\n        table: addresses\n        references: address_id\n        single: true\n",
			[]string{"m.yaml:9:9: aggregates.customer.relations.address.single: single applies to foreign_key relations only: references always gives one object and through always gives an array"}},
		{"single not a bool", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      orders:\n        table: orders\n        foreign_key: customer_id\n        single: yes\n",
			[]string{`m.yaml:9:17: aggregates.customer.relations.orders.single: expected true or false, got "yes"`}},
		{"bad order_by", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      orders:\n        table: orders\n        foreign_key: customer_id\n        order_by: placed_at downwards\n",
			[]string{"m.yaml:9:19: aggregates.customer.relations.orders.order_by: cannot read order_by \"placed_at downwards\": write `column [asc|desc] [nulls first|last]`, several separated by commas"}},
		{"rename of unlisted column", "version: 1\naggregates:\n  customer:\n    table: customers\n    columns: [id, name]\n    rename: {created_at: signed_up_at}\n",
			[]string{`m.yaml:6:14: aggregates.customer.rename.created_at: rename of "created_at", which is not in columns; valid: id, name`}},
		{"relation name with $", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      $orders: {table: orders, foreign_key: customer_id}\n",
			[]string{`m.yaml:6:7: aggregates.customer.relations.$orders: relation name "$orders" must not start with "$" (reserved)`}},
		{"bad index name", "version: 1\naggregates:\n  customer:\n    table: customers\n    elasticsearch: {index: Customers}\n",
			[]string{`m.yaml:5:28: aggregates.customer.elasticsearch.index: index name "Customers" is not valid in Elasticsearch: it must be lower-case`}},
		{"merge key", "version: 1\nbase: &b {table: customers}\naggregates:\n  customer:\n    <<: *b\n",
			[]string{
				`m.yaml:2:1: base: unknown key "base"; valid: aggregates, schema, version`,
				"m.yaml:4:3: aggregates.customer: missing `table:`, the table this aggregate reads",
				"m.yaml:5:5: aggregates.customer: YAML merge keys (<<) are not supported; write the keys out",
			}},
		{"two documents", "version: 1\naggregates:\n  a: {table: customers}\n---\nversion: 1\n",
			[]string{"m.yaml:4:1: a mapping file holds one YAML document; move this one to its own file"}},

		// Errors found by Bind, against the catalog.
		{"unknown table", "version: 1\naggregates:\n  customer:\n    table: custmers\n",
			[]string{`m.yaml:4:12: aggregates.customer.table: table public.custmers does not exist; did you mean "customers"?`}},
		{"unknown schema", "version: 1\nschema: sale\naggregates:\n  invoice:\n    table: invoices\n",
			[]string{`m.yaml:5:12: aggregates.invoice.table: table sale.invoices does not exist; did you mean "sales.invoices"?`}},
		{"unknown column", "version: 1\naggregates:\n  customer:\n    table: customers\n    columns: [id, nmae]\n",
			[]string{`m.yaml:5:19: aggregates.customer.columns.1: columns: column "nmae" does not exist in table public.customers; did you mean "name"?`}},
		{"unknown foreign key column", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      orders: {table: orders, foreign_key: customerid}\n",
			[]string{`m.yaml:6:44: aggregates.customer.relations.orders.foreign_key: foreign_key: column "customerid" does not exist in table public.orders; did you mean "customer_id"?`}},
		{"type mismatch", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      invoices: {table: sales.invoices, foreign_key: customer_ref}\n",
			[]string{`m.yaml:6:54: aggregates.customer.relations.invoices.foreign_key: foreign_key: sales.invoices.customer_ref (text) cannot be joined with public.customers.id (integer): the types differ; change one column's type or fix the mapping`}},
		{"composite key length", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      lines:\n        table: orders\n        foreign_key: customer_id\n        relations:\n          x: {table: lines2, references: [id]}\n",
			[]string{"m.yaml:10:42: aggregates.customer.relations.lines.relations.x.references: references has 1 column(s) (id) but the key of public.lines2 has 2 (order_id, line_no): list one column per key column, in key order"}},
		{"no primary key", "version: 1\naggregates:\n  thing:\n    table: nokey\n",
			[]string{"m.yaml:3:3: aggregates.thing: table public.nokey has no primary key; add `id: [column, …]` naming columns that identify a row"}},
		{"relation clashes with column", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      name: {table: orders, foreign_key: customer_id}\n",
			[]string{`m.yaml:6:7: aggregates.customer.relations.name: relation "name" clashes with column "name" in the same object; rename the relation or the column (rename: {name: …})`}},
		{"rename clash", "version: 1\naggregates:\n  customer:\n    table: customers\n    rename: {email: name}\n",
			[]string{`m.yaml:5:14: aggregates.customer.rename.email: key "name" is given by both column "name" and column "email"; rename one of them`}},
		{"unknown order_by column", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      orders: {table: orders, foreign_key: customer_id, order_by: [placed desc]}\n",
			[]string{`m.yaml:6:68: aggregates.customer.relations.orders.order_by.0: order_by: column "placed" does not exist in table public.orders; did you mean "placed_at"?`}},
		{"unknown through table", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      tags:\n        table: tags\n        through: {table: customer_tag, foreign_key: customer_id, references: tag_id}\n",
			[]string{`m.yaml:8:26: aggregates.customer.relations.tags.through.table: table public.customer_tag does not exist; did you mean "customer_tags"?`}},
		{"unknown value column", "version: 1\naggregates:\n  customer:\n    table: customers\n    relations:\n      tags:\n        table: tags\n        through: {table: customer_tags, foreign_key: customer_id, references: tag_id}\n        value: title\n",
			[]string{`m.yaml:9:16: aggregates.customer.relations.tags.value: value: column "title" does not exist in table public.tags; valid: id, name`}},
	}
	if len(tests) < 25 {
		t.Fatalf("only %d cases", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Load([]File{{Name: "m.yaml", Data: []byte(tt.yaml)}})
			if err == nil {
				_, err = Bind(set, cat)
			}
			if err == nil {
				t.Fatal("no error")
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, want ErrorList: %v", err, err)
			}
			var got []string
			for _, e := range list {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestLoadDuplicateAcrossFiles(t *testing.T) {
	a := File{Name: "a.yaml", Data: []byte("version: 1\naggregates:\n  customer: {table: customers}\n")}
	b := File{Name: "b.yaml", Data: []byte("version: 1\naggregates:\n  product: {table: products}\n  customer: {table: customers}\n")}
	_, err := Load([]File{a, b})
	want := `b.yaml:4:3: aggregates.customer: aggregate "customer" is already defined at a.yaml:3:3; aggregate names must be unique across all mapping files`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant  %s", err, want)
	}
}

func TestLoadReportsAllErrors(t *testing.T) {
	y := "version: 3\naggregates:\n  customer:\n    tabel: customers\n    relations:\n      orders: {table: orders}\n"
	_, err := Load([]File{{Name: "x.yaml", Data: []byte(y)}})
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 4 {
		t.Fatalf("want 4 errors, got %v", err)
	}
}

func TestLoadAliasBomb(t *testing.T) {
	// Relations that alias relations expand exponentially (10^9 nodes
	// here); Load must stop early with an error, not hang.
	var b strings.Builder
	b.WriteString("version: 1\naggregates:\n  a:\n    table: t\n    relations:\n      r0: &r0 {table: t, foreign_key: x}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "      r%d: &r%d {table: t, foreign_key: x, relations: {", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "k%d: *r%d", j, i-1)
		}
		b.WriteString("}}\n")
	}
	_, err := Load([]File{{Name: "bomb.yaml", Data: []byte(b.String())}})
	if err == nil || !strings.Contains(err.Error(), "file too large") {
		t.Fatalf("err = %.300v", err)
	}
}
