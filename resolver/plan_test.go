package resolver

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// shopModel binds a small mapping to a hand-written catalog: a root with
// one-to-many (orders), many-to-one (address), many-to-many (tags), and a
// second level (orders.lines).
func shopModel(t *testing.T) *mappings.Model {
	t.Helper()
	col := func(name, typ string, num int) *mappings.Column {
		cat := byte('N')
		if typ == "text" {
			cat = 'S'
		}
		return &mappings.Column{Name: name, Num: num, Type: typ, BaseType: typ, Category: cat}
	}
	table := func(name string, pk []string, cols ...*mappings.Column) *mappings.Table {
		return &mappings.Table{Name: mappings.TableName{Schema: "public", Name: name}, Kind: 'r', Columns: cols,
			PrimaryKey: pk, ReplicaIdentity: 'f', Indexes: []*mappings.Index{{Name: name + "_pkey", Columns: pk, Unique: true, Primary: true}}}
	}
	fk := func(cols []string, ref string, refCols []string) *mappings.ForeignKey {
		return &mappings.ForeignKey{Name: "fk_" + ref, Columns: cols, RefTable: mappings.TableName{Schema: "public", Name: ref}, RefColumns: refCols}
	}
	customers := table("customers", []string{"id"}, col("id", "integer", 1), col("name", "text", 2), col("address_id", "integer", 3), col("note", "text", 4))
	customers.ForeignKeys = []*mappings.ForeignKey{fk([]string{"address_id"}, "addresses", []string{"id"})}
	orders := table("orders", []string{"id"}, col("id", "integer", 1), col("customer_id", "integer", 2), col("total", "numeric", 3))
	orders.ForeignKeys = []*mappings.ForeignKey{fk([]string{"customer_id"}, "customers", []string{"id"})}
	lines := table("lines", []string{"id"}, col("id", "integer", 1), col("order_id", "integer", 2), col("sku", "text", 3))
	lines.ForeignKeys = []*mappings.ForeignKey{fk([]string{"order_id"}, "orders", []string{"id"})}
	addresses := table("addresses", []string{"id"}, col("id", "integer", 1), col("city", "text", 2))
	tags := table("tags", []string{"id"}, col("id", "integer", 1), col("name", "text", 2))
	ct := table("customer_tags", []string{"customer_id", "tag_id"}, col("customer_id", "integer", 1), col("tag_id", "integer", 2))
	ct.ForeignKeys = []*mappings.ForeignKey{fk([]string{"customer_id"}, "customers", []string{"id"}), fk([]string{"tag_id"}, "tags", []string{"id"})}
	cat := &mappings.Catalog{Tables: []*mappings.Table{addresses, ct, customers, lines, orders, tags}}
	set, err := mappings.Load([]mappings.File{{Name: "shop.yaml", Data: []byte(`version: 1
aggregates:
  customer:
    table: customers
    columns: [id, name, address_id]
    relations:
      orders:
        table: orders
        foreign_key: customer_id
        relations:
          lines: {table: lines, foreign_key: order_id}
      address: {table: addresses, references: address_id}
      tags:
        table: tags
        through: {table: customer_tags, foreign_key: customer_id, references: tag_id}
        value: name
`)}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := mappings.Bind(set, cat)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func img(s string) image {
	i, err := decodeImage(json.RawMessage(s))
	if err != nil {
		panic(err)
	}
	return i
}

func TestWatchChanged(t *testing.T) {
	watch := []string{"id", "name", "address_id"}
	for _, tc := range []struct {
		name          string
		before, after string
		toast         []string
		want          bool
	}{
		{"unwatched column only", `{"id":1,"name":"a","address_id":2,"note":"x"}`, `{"id":1,"name":"a","address_id":2,"note":"y"}`, nil, false},
		{"watched column", `{"id":1,"name":"a","address_id":2}`, `{"id":1,"name":"b","address_id":2}`, nil, true},
		{"link column", `{"id":1,"name":"a","address_id":2}`, `{"id":1,"name":"a","address_id":null}`, nil, true},
		{"no before image (replica identity default)", `null`, `{"id":1,"name":"a","address_id":2}`, nil, true},
		{"key-only before image", `{"id":1}`, `{"id":1,"name":"a","address_id":2}`, nil, true},
		{"unchanged toast is unchanged", `{"id":1,"address_id":2}`, `{"id":1,"address_id":2}`, []string{"name"}, false},
		{"whitespace differs only", `{"id":1,"name":"a","address_id":2}`, `{"id": 1,"name": "a","address_id": 2}`, nil, false},
		{"number text differs", `{"id":1,"name":"a","address_id":2}`, `{"id":1,"name":"a","address_id":2.0}`, nil, true},
	} {
		if got := watchChanged(watch, img(tc.before), img(tc.after), tc.toast); got != tc.want {
			t.Errorf("%s: watchChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFromValues(t *testing.T) {
	for _, tc := range []struct {
		cols []string
		img  string
		want string // "" = not ok
	}{
		{[]string{"customer_id"}, `{"id":1,"customer_id":7}`, `[7]`},
		{[]string{"a", "b"}, `{"b":"x","a":12345678901234567890}`, `[12345678901234567890,"x"]`},
		{[]string{"customer_id"}, `{"id":1,"customer_id":null}`, ""},
		{[]string{"customer_id"}, `{"id":1}`, ""},
		{[]string{"customer_id"}, `null`, ""},
	} {
		vals, ok := fromValues(tc.cols, img(tc.img))
		got := ""
		if ok {
			b, _ := json.Marshal(vals)
			got = string(b)
		}
		if got != tc.want {
			t.Errorf("fromValues(%v, %s) = %s, want %s", tc.cols, tc.img, got, tc.want)
		}
	}
}

func change(op wire.Op, table, before, after string, lsn string, xid uint32, seq int64) *wire.Change {
	raw := func(s string) json.RawMessage {
		if s == "" {
			return json.RawMessage("null")
		}
		return json.RawMessage(s)
	}
	return &wire.Change{Op: op, Schema: "public", Table: table, Before: raw(before), After: raw(after),
		Source: wire.Source{CommitLSN: lsn, XID: xid, Seq: seq}}
}

// describe renders a plan for comparison.
func describe(p *plan) []string {
	var out []string
	for _, r := range p.direct.refs {
		out = append(out, fmt.Sprintf("ref %s %s lsn=%s xid=%d %s/%s", r.Aggregate, r.Key, r.Ref.CommitLSN, r.Ref.XID, r.Ref.Table, r.Ref.Op))
	}
	for _, l := range p.lookups {
		b, _ := json.Marshal(l.tuples)
		out = append(out, fmt.Sprintf("lookup %s %s lsn=%s", l.route.Path, b, l.cause.ref.CommitLSN))
	}
	for _, tr := range p.truncated {
		out = append(out, fmt.Sprintf("truncate %s root=%v lsn=%s", tr.aggregate.Name, tr.root, tr.cause.ref.CommitLSN))
	}
	for _, d := range p.noBefore {
		out = append(out, fmt.Sprintf("dead-letter %s %s missing=%v aggregates=%v", d.table, d.change.Key, d.columns, d.aggregates))
	}
	return out
}

// keyed sets a change's key.
func keyed(c *wire.Change, key string) *wire.Change {
	c.Key = json.RawMessage(key)
	return c
}

func TestPlan(t *testing.T) {
	m := shopModel(t)
	p := &planner{model: m, want: func(string) bool { return true }}
	for _, tc := range []struct {
		name    string
		changes []*wire.Change
		want    []string
	}{
		{"insert root", []*wire.Change{change("c", "customers", "", `{"id":1,"name":"a","address_id":null,"note":null}`, "0/10", 5, 0)},
			[]string{"ref customer {\"id\":1} lsn=0/10 xid=5 public.customers/c"}},
		{"update of an unmapped column resolves to nothing", []*wire.Change{change("u", "customers", `{"id":1,"name":"a","address_id":null,"note":"x"}`, `{"id":1,"name":"a","address_id":null,"note":"y"}`, "0/10", 5, 0)},
			nil},
		{"foreign key move gives old and new parent", []*wire.Change{change("u", "orders", `{"id":9,"customer_id":1,"total":2}`, `{"id":9,"customer_id":2,"total":2}`, "0/20", 6, 0)},
			[]string{"ref customer {\"id\":1} lsn=0/20 xid=6 public.orders/u", "ref customer {\"id\":2} lsn=0/20 xid=6 public.orders/u"}},
		{"root key change (delete + create) gives old and new id", []*wire.Change{
			change("d", "customers", `{"id":1,"name":"a","address_id":null,"note":null}`, "", "0/30", 7, 0),
			change("c", "customers", "", `{"id":2,"name":"a","address_id":null,"note":null}`, "0/30", 7, 1)},
			[]string{"ref customer {\"id\":1} lsn=0/30 xid=7 public.customers/d", "ref customer {\"id\":2} lsn=0/30 xid=7 public.customers/c"}},
		{"duplicates coalesce to the latest change", []*wire.Change{
			change("c", "orders", "", `{"id":9,"customer_id":1,"total":2}`, "0/40", 8, 0),
			change("u", "orders", `{"id":9,"customer_id":1,"total":2}`, `{"id":9,"customer_id":1,"total":3}`, "0/50", 9, 0),
			change("c", "customer_tags", "", `{"customer_id":1,"tag_id":4}`, "0/45", 10, 0)},
			[]string{"ref customer {\"id\":1} lsn=0/50 xid=9 public.orders/u"}},
		{"null link belongs to nothing", []*wire.Change{change("c", "orders", "", `{"id":9,"customer_id":null,"total":2}`, "0/40", 8, 0)},
			nil},
		{"lookups are batched per route, distinct", []*wire.Change{
			change("u", "lines", `{"id":1,"order_id":3,"sku":"a"}`, `{"id":1,"order_id":4,"sku":"a"}`, "0/60", 11, 0),
			change("c", "lines", "", `{"id":2,"order_id":3,"sku":"b"}`, "0/61", 12, 0),
			change("u", "addresses", `{"id":5,"city":"x"}`, `{"id":5,"city":"y"}`, "0/62", 13, 0),
			change("u", "tags", `{"id":6,"name":"x"}`, `{"id":6,"name":"y"}`, "0/63", 14, 0)},
			[]string{"lookup aggregates.customer.relations.orders.relations.lines [[3],[4]] lsn=0/61",
				"lookup aggregates.customer.relations.address [[5]] lsn=0/62",
				"lookup aggregates.customer.relations.tags [[6]] lsn=0/63"}},
		{"truncate of a child and of the root", []*wire.Change{
			change("t", "lines", "", "", "0/70", 15, 0),
			change("t", "customers", "", "", "0/71", 16, 0)},
			[]string{"truncate customer root=true lsn=0/71"}},
		{"truncate of a child only", []*wire.Change{change("t", "orders", "", "", "0/70", 15, 0)},
			[]string{"truncate customer root=false lsn=0/70"}},
		{"unmapped table", []*wire.Change{change("c", "other", "", `{"id":1}`, "0/70", 15, 0)},
			nil},
		// Replica identity changed from FULL while decant ran: the old
		// parent cannot be found; the change is dead-lettered, the new
		// parent still rebuilt.
		{"update without a before image: new parent only, dead-lettered", []*wire.Change{
			keyed(change("u", "orders", "", `{"id":9,"customer_id":2,"total":2}`, "0/80", 17, 0), `{"id":9}`)},
			[]string{"ref customer {\"id\":2} lsn=0/80 xid=17 public.orders/u",
				"dead-letter public.orders {\"id\":9} missing=[customer_id] aggregates=[customer]"}},
		{"delete with a key-only before image: dead-lettered", []*wire.Change{
			keyed(change("d", "orders", `{"id":9}`, "", "0/81", 18, 0), `{"id":9}`)},
			[]string{"dead-letter public.orders {\"id\":9} missing=[customer_id] aggregates=[customer]"}},
		{"root update without a before image: its key is its id", []*wire.Change{
			keyed(change("u", "customers", "", `{"id":1,"name":"b","address_id":null,"note":null}`, "0/82", 19, 0), `{"id":1}`)},
			[]string{"ref customer {\"id\":1} lsn=0/82 xid=19 public.customers/u"}},
		{"join table delete: both links are its key", []*wire.Change{
			keyed(change("d", "customer_tags", `{"customer_id":1,"tag_id":4}`, "", "0/83", 20, 0), `{"customer_id":1,"tag_id":4}`)},
			[]string{"ref customer {\"id\":1} lsn=0/83 xid=20 public.customer_tags/d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.plan(tc.changes)
			if err != nil {
				t.Fatal(err)
			}
			if d := describe(got); !reflect.DeepEqual(d, tc.want) {
				t.Errorf("plan:\n  got  %s\n  want %s", strings.Join(d, "\n       "), strings.Join(tc.want, "\n       "))
			}
		})
	}
}

func TestPlanCollectsXIDs(t *testing.T) {
	p := &planner{model: shopModel(t), want: func(string) bool { return true }}
	snap := change("r", "orders", "", `{"id":1,"customer_id":1,"total":1}`, "0/1", 3, 0)
	snap.Source.Snapshot = true
	got, err := p.plan([]*wire.Change{
		snap,
		change("c", "orders", "", `{"id":2,"customer_id":1,"total":1}`, "0/2", 7, 0),
		change("c", "orders", "", `{"id":3,"customer_id":1,"total":1}`, "0/2", 7, 1),
		change("c", "orders", "", `{"id":4,"customer_id":1,"total":1}`, "0/3", 8, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.xids, []uint32{7, 8}) {
		t.Errorf("xids = %v, want [7 8] (snapshot rows need no visibility check)", got.xids)
	}
}

func TestPlanFiltersAggregates(t *testing.T) {
	p := &planner{model: shopModel(t), want: func(string) bool { return false }}
	got, err := p.plan([]*wire.Change{change("c", "orders", "", `{"id":2,"customer_id":1,"total":1}`, "0/2", 7, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if d := describe(got); len(d) > 0 {
		t.Errorf("plan for no wanted aggregate: %v", d)
	}
}

func TestCoalescedBuildKeys(t *testing.T) {
	c := newCoalesced()
	c.add([]byte(`{"id":2}`), wire.Ref{XID: 5})
	c.add([]byte(`{"id":1}`), wire.Ref{XID: 5})
	c.add([]byte(`{"id":2}`), wire.Ref{XID: 6})
	c.add([]byte(`{"id":2}`), wire.Ref{Backfill: true})
	c.add([]byte(`{"id":3}`), wire.Ref{Backfill: true})
	var keys []string
	for _, k := range c.keys {
		keys = append(keys, string(k))
	}
	if want := []string{`{"id":2}`, `{"id":1}`, `{"id":3}`}; !slices.Equal(keys, want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	var got []uint32
	for _, k := range c.keys {
		got = c.appendXids(got, k)
	}
	if !slices.Equal(got, []uint32{5, 6}) {
		t.Errorf("xids = %v, want [5 6]", got)
	}
	if got := c.appendXids(nil, c.keys[2]); len(got) != 0 {
		t.Errorf("backfill refs carry no xid, got %v", got)
	}
}

func TestFullXID(t *testing.T) {
	const epoch = uint64(3) << 32
	for _, tc := range []struct {
		xid  uint32
		xmax uint64
		want uint64
	}{
		{1000, epoch | 2000, epoch | 1000},                      // committed, same epoch
		{2000, epoch | 2000, epoch | 2000},                      // = xmax: not yet visible
		{2005, epoch | 2000, epoch | 2005},                      // beyond xmax: stays in the future
		{0xFFFFFF00, epoch | 100, (epoch - 1<<32) | 0xFFFFFF00}, // just before the epoch wrapped
		{100, (epoch - 1<<32) | 0xFFFFFF00, epoch | 100},        // after the wrap, xmax not yet past it
		{4000000000, 1000, 3},                                   // impossible in epoch 0: treated as old
		{700, 1000, 700},
	} {
		if got := fullXID(tc.xid, tc.xmax); got != tc.want {
			t.Errorf("fullXID(%d, %d) = %d, want %d", tc.xid, tc.xmax, got, tc.want)
		}
	}
}

func TestParseID(t *testing.T) {
	m := shopModel(t)
	a := m.Aggregate("customer")
	for in, want := range map[string]string{
		`7`:              `{"id":7}`,
		`{"id": 7}`:      `{"id":7}`,
		`"x"`:            `{"id":"x"}`,
		`abc`:            `{"id":"abc"}`,
		`{"id":7,"x":1}`: "error",
		`{"x":1}`:        "error",
	} {
		got, err := ParseID(a, in)
		if err != nil {
			got = []byte("error")
		}
		if string(got) != want {
			t.Errorf("ParseID(%s) = %s, want %s (err %v)", in, got, want, err)
		}
	}
}

func TestSinksFirstErrorWins(t *testing.T) {
	var a, b recordSink
	fail := sinkFunc(func([]wire.Document) error { return fmt.Errorf("boom") })
	docs := []wire.Document{{Aggregate: "x", ID: json.RawMessage(`{"id":1}`), Version: 1}}
	if err := (Sinks{&a, fail, &b}).Write(t.Context(), docs); err == nil || err.Error() != "boom" {
		t.Errorf("Sinks.Write error = %v, want boom", err)
	}
	if len(a.docs) != 1 || len(b.docs) != 1 {
		t.Errorf("every sink is written even when one fails: %d, %d", len(a.docs), len(b.docs))
	}
}

// Rows of an initial snapshot rebuild their aggregates once per snapshot,
// not once per row (regression: 130k snapshot rows of the demo shop gave
// 85k refs for 10k documents).
func TestPlanSnapshotRowsRebuildOncePerSnapshot(t *testing.T) {
	p := &planner{model: shopModel(t), want: func(string) bool { return true }}
	row := func(id int, lsn string) *wire.Change {
		c := change("r", "orders", "", fmt.Sprintf(`{"id":%d,"customer_id":1,"total":1}`, id), lsn, 0, int64(id))
		c.Source.Snapshot, c.Source.LSN = true, lsn // an initial snapshot's rows: both are its consistent point
		return c
	}
	first, err := p.plan([]*wire.Change{row(1, "0/10"), row(2, "0/10")})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.truncated) == 0 || len(first.direct.refs) != 0 || len(first.lookups) != 0 {
		t.Fatalf("first batch of snapshot rows: want one full rebuild per aggregate and no per-row refs, got %v", describe(first))
	}
	n := len(first.truncated)
	orders := mappings.TableName{Schema: "public", Name: "orders"}
	if !p.snapshotPlanned(orders, []byte("0/10")) {
		t.Error("snapshotPlanned(orders, 0/10) = false after its rebuild was planned: every later row would be decoded")
	}
	if p.snapshotPlanned(orders, []byte("0/20")) {
		t.Error("snapshotPlanned(orders, 0/20) = true: a new snapshot's first row would be skipped and its documents never rebuilt")
	}
	if !p.snapshotPlanned(orders, []byte("0/10")) || p.snapshotPlanned(orders, []byte("0/20")) {
		t.Error("snapshotPlanned's remembered answer differs from the planned rebuilds")
	}
	// A failed batch ends its session; the next one forgets what it
	// planned and rebuilds again from the first snapshot row it re-reads.
	failed := *p
	failed.snapshots = maps.Clone(p.snapshots)
	failed.forget()
	if failed.snapshotPlanned(orders, []byte("0/10")) {
		t.Error("snapshotPlanned after forget: a rebuild whose refs were never acknowledged would be skipped for good")
	}
	if replanned, err := failed.plan([]*wire.Change{row(1, "0/10")}); err != nil || len(replanned.truncated) != n {
		t.Errorf("after forget, the snapshot's first row planned %v rebuilds (err %v), want %d", describe(replanned), err, n)
	}
	again, err := p.plan([]*wire.Change{row(3, "0/10")})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.truncated) != 0 {
		t.Fatalf("second batch of the same snapshot planned another rebuild: %v", describe(again))
	}
	next, err := p.plan([]*wire.Change{row(4, "0/20")})
	if err != nil {
		t.Fatal(err)
	}
	if len(next.truncated) != n {
		t.Fatalf("a new snapshot (new LSN) must rebuild again: got %d rebuilds, want %d", len(next.truncated), n)
	}
	// An online table snapshot (issue 18): its chunks' rows carry their
	// chunk's high watermark as commit LSN and the snapshot's start as
	// source.lsn; the whole snapshot rebuilds once.
	online := func(id int, commit string) *wire.Change {
		c := row(id, commit)
		c.Source.LSN = "0/30"
		return c
	}
	chunks, err := p.plan([]*wire.Change{online(5, "0/40"), online(6, "0/40"), online(7, "0/50")})
	if err != nil {
		t.Fatal(err)
	}
	later, err := p.plan([]*wire.Change{online(8, "0/60")})
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks.truncated) != n || len(later.truncated) != 0 {
		t.Fatalf("an online snapshot of three chunks planned %d and then %d rebuilds, want %d and 0", len(chunks.truncated), len(later.truncated), n)
	}
}

// A polled batch of the build stage names the keys it builds, so that a
// later batch, which starts while this one's documents are written, holds
// back the keys it shares with it until it has written them — and only
// those: a later build of a key must write after the earlier one (it could
// otherwise be overwritten by an earlier one carrying the same version).
func TestBuildBatchesHoldSharedKeys(t *testing.T) {
	model := shopModel(t)
	a := model.Aggregate("customer")
	if a == nil {
		t.Fatal("no customer aggregate in shopModel")
	}
	b := &Builder{cfg: Config{BatchSize: 2, Workers: 1}, met: newBuildMetrics(nil), log: slog.Default(),
		byTopic: map[string]*mappings.Aggregate{"p.refs.customer": a}}
	rec := func(part int32, id int) *kgo.Record {
		return &kgo.Record{Topic: "p.refs.customer", Partition: part, Key: []byte(fmt.Sprintf(`{"id":%d}`, id)), Value: []byte(`{"aggregate":"customer"}`)}
	}
	first := b.plan([]*kgo.Record{rec(0, 1), rec(0, 2), rec(1, 3), rec(0, 1)})
	if len(first.chunks) != 2 || len(first.keys) != 3 {
		t.Fatalf("plan: %d chunks and %d keys, want 2 chunks of at most 2 keys and 3 distinct keys", len(first.chunks), len(first.keys))
	}
	other := b.plan([]*kgo.Record{rec(2, 4), rec(2, 5)})
	other.holdKeysOf([]*batch{first})
	if len(other.later) != 0 || len(other.after) != 0 {
		t.Error("a batch with keys distinct from the one in flight waits for it")
	}
	again := b.plan([]*kgo.Record{rec(2, 5), rec(1, 3)})
	again.holdKeysOf([]*batch{first, other})
	held := func(cs []chunk) (keys []string) {
		for _, c := range cs {
			for _, k := range c.keys {
				keys = append(keys, string(k))
			}
		}
		slices.Sort(keys)
		return keys
	}
	if got := held(again.later); !slices.Equal(got, []string{`{"id":3}`, `{"id":5}`}) {
		t.Errorf("keys held for the batches in flight: %v, want {\"id\":3} (first) and {\"id\":5} (other)", got)
	}
	if len(again.chunks) != 0 {
		t.Errorf("keys built at once: %v, want none", held(again.chunks))
	}
	if len(again.after) != 2 || !slices.Contains(again.after, first) || !slices.Contains(again.after, other) {
		t.Errorf("the held keys wait for %d batches, want first and other", len(again.after))
	}
	mixed := b.plan([]*kgo.Record{rec(1, 3), rec(1, 9)})
	mixed.holdKeysOf([]*batch{first})
	if got := held(mixed.chunks); !slices.Equal(got, []string{`{"id":9}`}) {
		t.Errorf("keys built at once: %v, want only {\"id\":9}: a shared key must not hold the others back", got)
	}
}

func TestLooseKey(t *testing.T) {
	same := [][2]string{{`{"id":"2"}`, `{"id":2}`}, {`{"a":1,"b":"x"}`, `{"b":"x","a":"1"}`}}
	for _, c := range same {
		if looseKey([]byte(c[0])) != looseKey([]byte(c[1])) {
			t.Errorf("looseKey(%s) != looseKey(%s)", c[0], c[1])
		}
	}
	if looseKey([]byte(`{"id":2}`)) == looseKey([]byte(`{"id":3}`)) || looseKey([]byte(`{"id":2}`)) == looseKey([]byte(`{"key":2}`)) {
		t.Error("looseKey merges different keys")
	}
}
