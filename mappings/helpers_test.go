package mappings

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./mappings -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run go test ./mappings -update after checking):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func goldenJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, name, append(b, '\n'))
}

var typeShorthands = map[string]string{
	"int": "integer", "int2": "smallint", "int8": "bigint", "text": "text", "varchar": "character varying",
	"tstz": "timestamp with time zone", "ts": "timestamp without time zone", "numeric": "numeric",
	"bool": "boolean", "date": "date", "jsonb": "jsonb", "json": "json", "uuid": "uuid", "real": "real",
	"float8": "double precision", "bytea": "bytea", "time": "time without time zone", "inet": "inet",
	"int[]": "integer[]", "text[]": "text[]", "mood": "mood", "interval": "interval",
}

var typeCategories = map[string]byte{
	"integer": 'N', "smallint": 'N', "bigint": 'N', "numeric": 'N', "real": 'N', "double precision": 'N',
	"text": 'S', "character varying": 'S', "boolean": 'B', "date": 'D', "timestamp with time zone": 'D',
	"timestamp without time zone": 'D', "time without time zone": 'D', "jsonb": 'U', "json": 'U', "uuid": 'U',
	"bytea": 'U', "inet": 'I', "integer[]": 'A', "text[]": 'A', "mood": 'E', "interval": 'T',
}

// testCatalog builds a Catalog from lines like
//
//	public.orders: id int pk; customer_id int ->public.customers.id; placed_at tstz; idx(customer_id)
//
// Items are `column type [pk] [nn] [uniq] [->schema.table.column]`, or
// pk(a,b), idx(a,b), uniq(a,b), fk(a,b)->schema.table(x,y), replica=full|nothing|default.
func testCatalog(t testing.TB, spec string) *Catalog {
	t.Helper()
	cat := &Catalog{}
	for _, line := range strings.Split(strings.TrimSpace(spec), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, items, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("testCatalog: no ':' in %q", line)
		}
		schema, tname, _ := strings.Cut(strings.TrimSpace(name), ".")
		tb := &Table{Name: TableName{schema, tname}, Kind: 'r', ReplicaIdentity: 'd'}
		for _, item := range strings.Split(items, ";") {
			item = strings.TrimSpace(item)
			switch {
			case item == "":
			case strings.HasPrefix(item, "pk("):
				tb.PrimaryKey = listArg(item)
				tb.Indexes = append(tb.Indexes, &Index{Name: tname + "_pkey", Columns: tb.PrimaryKey, Unique: true, Primary: true})
			case strings.HasPrefix(item, "idx("):
				tb.Indexes = append(tb.Indexes, &Index{Name: tname + "_idx", Columns: listArg(item)})
			case strings.HasPrefix(item, "uniq("):
				tb.Indexes = append(tb.Indexes, &Index{Name: tname + "_uniq", Columns: listArg(item), Unique: true})
			case strings.HasPrefix(item, "fk("):
				cols, ref, _ := strings.Cut(item, "->")
				rt, rcols, _ := strings.Cut(ref, "(")
				rs, rn, _ := strings.Cut(rt, ".")
				tb.ForeignKeys = append(tb.ForeignKeys, &ForeignKey{Name: tname + "_fk", Columns: listArg(cols), RefTable: TableName{rs, rn}, RefColumns: listArg("(" + rcols)})
			case strings.HasPrefix(item, "replica="):
				tb.ReplicaIdentity = map[string]byte{"full": 'f', "nothing": 'n', "default": 'd'}[strings.TrimPrefix(item, "replica=")]
			default:
				f := strings.Fields(item)
				typ, ok := typeShorthands[f[1]]
				if !ok {
					t.Fatalf("testCatalog: unknown type %q", f[1])
				}
				c := &Column{Name: f[0], Num: len(tb.Columns) + 1, Type: typ, BaseType: typ, Category: typeCategories[typ]}
				if strings.HasSuffix(typ, "[]") {
					c.ElemType = strings.TrimSuffix(typ, "[]")
				}
				for _, flag := range f[2:] {
					switch {
					case flag == "pk":
						tb.PrimaryKey = append(tb.PrimaryKey, c.Name)
						c.NotNull = true
					case flag == "nn":
						c.NotNull = true
					case flag == "uniq":
						tb.Indexes = append(tb.Indexes, &Index{Name: c.Name + "_key", Columns: []string{c.Name}, Unique: true})
					case strings.HasPrefix(flag, "->"):
						parts := strings.Split(flag[2:], ".")
						tb.ForeignKeys = append(tb.ForeignKeys, &ForeignKey{Name: c.Name + "_fkey", Columns: []string{c.Name}, RefTable: TableName{parts[0], parts[1]}, RefColumns: []string{parts[2]}})
					default:
						t.Fatalf("testCatalog: unknown flag %q", flag)
					}
				}
				tb.Columns = append(tb.Columns, c)
			}
		}
		for _, c := range tb.Columns {
			if slices.Contains(tb.PrimaryKey, c.Name) {
				c.NotNull = true
			}
		}
		if len(tb.PrimaryKey) > 0 && !hasPrimaryIndex(tb) {
			tb.Indexes = append(tb.Indexes, &Index{Name: tname + "_pkey", Columns: tb.PrimaryKey, Unique: true, Primary: true})
		}
		switch tb.ReplicaIdentity {
		case 'd':
			tb.IdentityColumns = tb.PrimaryKey
		case 'f':
			tb.IdentityColumns = tb.columnNames()
		}
		cat.Tables = append(cat.Tables, tb)
	}
	cat.sort()
	return cat
}

func hasPrimaryIndex(t *Table) bool {
	for _, ix := range t.Indexes {
		if ix.Primary {
			return true
		}
	}
	return false
}

func listArg(s string) []string {
	s = s[strings.Index(s, "(")+1:]
	s = strings.TrimSuffix(strings.TrimSpace(s), ")")
	var out []string
	for _, p := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(p))
	}
	return out
}

// shopCatalog is the database of the PRODUCT.md §3 example.
const shopCatalog = `
public.addresses: id int pk; street text; city text; country text
public.customers: id int pk; name text nn; email text uniq; created_at tstz nn; address_id int ->public.addresses.id
public.orders: id int pk; customer_id int nn ->public.customers.id; placed_at tstz nn; total numeric; idx(customer_id)
public.order_lines: id int pk; order_id int nn ->public.orders.id; product_id int nn ->public.products.id; qty int nn; price numeric; idx(order_id); idx(product_id)
public.products: id int pk; sku text nn uniq; title text nn; price numeric
public.tags: id int pk; name text nn uniq
public.customer_tags: customer_id int ->public.customers.id; tag_id int ->public.tags.id; pk(customer_id, tag_id); idx(tag_id)
`

// productExample is the mapping of PRODUCT.md §3, verbatim.
var productExample = func() string {
	b, err := os.ReadFile(filepath.Join("testdata", "product_example.yaml"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func mustLoad(t testing.TB, files ...File) *Set {
	t.Helper()
	set, err := Load(files)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return set
}

func mustBind(t testing.TB, cat *Catalog, yamlText string) *Model {
	t.Helper()
	set := mustLoad(t, File{Name: "test.yaml", Data: []byte(yamlText)})
	m, err := Bind(set, cat)
	if err != nil {
		t.Fatalf("Bind: %v", err)
	}
	return m
}
