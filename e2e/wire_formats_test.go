package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

const wireSchema = `
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text, meta jsonb, note text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int NOT NULL, total numeric(12,2));
` + testenv.AllReplicaIdentityFull

const wireMapping = `version: 1
aggregates:
  customer:
    table: customers
    columns: [id, name, email, meta]
    elasticsearch: {index: IDX_customer}
    relations:
      orders: {table: orders, foreign_key: customer_id, columns: [id, total]}
`

// TestWireFormatsMatchGolden runs stream, map and build against the real
// servers, reads one record of each public format (raw change, ref,
// aggregate envelope, and the dead letters the pipeline can be made to
// write: stream/Kafka refused, map/no before image, index/Elasticsearch
// refused) and checks each has the structure (member names, order and JSON
// types; values such as LSNs, xids and times ignored) of its example in
// wire/testdata/*.golden, which wire's unit tests encode byte for byte.
// With DECANT_CAPTURE_DIR set, the captured records are also written there,
// one "key value" line per record, to refresh the golden files and
// docs/formats.md.
func TestWireFormatsMatchGolden(t *testing.T) {
	e, reg := newWirePipeline(t)
	e.pg.Exec(t, `INSERT INTO customers VALUES (7, 'Ken Lovelace', 'customer7@example.com', '{"level":1}', NULL)`)
	e.pg.Exec(t, `INSERT INTO orders VALUES (20006, 7, 281.00)`)
	e.waitQuiet(2 * time.Minute)
	e.pg.Exec(t, `UPDATE customers SET name = 'Ada Byron' WHERE id = 7`)
	e.waitQuiet(2 * time.Minute)

	// Dead letters: a level Elasticsearch mapped as a number gets text; an
	// order updated without its old customer_id in the before image; a row
	// larger than Kafka accepts.
	e.pg.Exec(t, `INSERT INTO customers VALUES (8, 'Grace Hopper', 'customer8@example.com', '{"level":"gold"}', NULL)`)
	e.pg.Exec(t, `ALTER TABLE orders REPLICA IDENTITY DEFAULT`)
	e.pg.Exec(t, `UPDATE orders SET customer_id = 8 WHERE id = 20006`)
	e.pg.Exec(t, `INSERT INTO customers VALUES (9, 'Huge', NULL, NULL, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 80000) g))`)

	ctx := testenv.Ctx(t)
	read := func(topic string, want func([]*kgo.Record) bool) []*kgo.Record {
		var recs []*kgo.Record
		testenv.WaitFor(t, "the records wanted in "+topic, 2*time.Minute, func() (bool, error) {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var err error
			recs, err = testenv.ReadTopic(rctx, e.k.Admin, e.k.Brokers, topic)
			return err == nil && want(recs), err
		})
		return recs
	}
	pick := func(recs []*kgo.Record, ok func(m map[string]any) bool) *kgo.Record { // the first that is ok
		for _, r := range recs {
			var m map[string]any
			if json.Unmarshal(r.Value, &m) == nil && ok(m) {
				return r
			}
		}
		return nil
	}
	has := func(ok func(m map[string]any) bool) func([]*kgo.Record) bool {
		return func(recs []*kgo.Record) bool { return pick(recs, ok) != nil }
	}
	update := func(m map[string]any) bool { return m["op"] == "u" }
	built := func(m map[string]any) bool {
		d, _ := m["doc"].(map[string]any)
		return d != nil && d["name"] == "Ada Byron"
	}
	dlq := func(stage, sink string) func(map[string]any) bool {
		return func(m map[string]any) bool { return m["stage"] == stage && (sink == "" || m["sink"] == sink) }
	}
	captured := map[string]*kgo.Record{}
	raw := read(wire.RawTopic(e.k.Prefix, "public", "customers"), has(update))
	captured["change"] = pick(raw, update)
	refs := read(wire.RefsTopic(e.k.Prefix, "customer"), has(func(m map[string]any) bool { return m["op"] == "u" && m["table"] == "public.customers" }))
	captured["ref"] = pick(refs, func(m map[string]any) bool { return m["op"] == "u" && m["table"] == "public.customers" })
	agg := read(wire.AggTopic(e.k.Prefix, "customer"), has(built))
	captured["document"] = pick(agg, built)
	dead := read(wire.DLQTopic(e.k.Prefix), func(recs []*kgo.Record) bool {
		return has(dlq("stream", ""))(recs) && has(dlq("map", ""))(recs) && has(dlq("index", "elasticsearch"))(recs)
	})
	captured["deadletter stream refused"] = pick(dead, dlq("stream", ""))
	captured["deadletter map"] = pick(dead, dlq("map", ""))
	captured["deadletter index elasticsearch"] = pick(dead, dlq("index", "elasticsearch"))

	// Records no decant stage wrote: a raw record that is not a change
	// event and a ref whose key is not a customer id. Each goes to the
	// dead-letter topic, is counted, and the stages go on.
	for _, r := range []*kgo.Record{
		{Topic: wire.RawTopic(e.k.Prefix, "public", "customers"), Key: []byte(`{"id":7}`), Value: []byte(`not a change`)},
		{Topic: wire.RefsTopic(e.k.Prefix, "customer"), Key: []byte(`{"customer_id":7}`), Value: []byte(`{}`)},
	} {
		if err := e.k.Client.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	unreadable := func(stage string) func(map[string]any) bool {
		return func(m map[string]any) bool { return m["stage"] == stage && m["record"] != nil }
	}
	dead = read(wire.DLQTopic(e.k.Prefix), func(recs []*kgo.Record) bool {
		return has(unreadable("map"))(recs) && has(unreadable("build"))(recs)
	})
	captured["deadletter map unreadable"] = pick(dead, unreadable("map"))
	captured["deadletter build unreadable"] = pick(dead, unreadable("build"))
	for name, want := range map[string]float64{"decant_resolver_map_undecodable_total": 1, "decant_resolver_build_undecodable_total": 1} {
		if got := gathered(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	e.pg.Exec(t, `UPDATE customers SET name = 'After the bad records' WHERE id = 7`)
	read(wire.AggTopic(e.k.Prefix, "customer"), has(func(m map[string]any) bool {
		d, _ := m["doc"].(map[string]any)
		return d != nil && d["name"] == "After the bad records"
	}))

	if dir := os.Getenv("DECANT_CAPTURE_DIR"); dir != "" {
		var names []string
		for n := range captured {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			r := captured[n]
			var hs []string
			for _, h := range r.Headers {
				hs = append(hs, h.Key+":"+string(h.Value))
			}
			fmt.Fprintf(&b, "%s\ttopic=%s headers=%s\n%s  %s\n", n, r.Topic, strings.Join(hs, ","), r.Key, r.Value)
		}
		if err := os.WriteFile(filepath.Join(dir, "wire-capture.txt"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	golden := map[string]string{ // kind → golden file and the line of its example
		"change": "change.golden", "ref": "ref.golden", "document": "document.golden",
		"deadletter stream refused": "deadletter.golden", "deadletter map": "deadletter.golden", "deadletter index elasticsearch": "deadletter.golden",
		"deadletter map unreadable": "deadletter.golden", "deadletter build unreadable": "deadletter.golden",
	}
	for kind, r := range captured {
		want := wireGoldenShapes(t, golden[kind])
		got := wireShape(r.Value)
		found := false
		for _, w := range want {
			found = found || w == got
		}
		if !found {
			t.Errorf("%s: captured record %s\nhas the structure %s\nwhich no example in wire/testdata/%s has:\n%s", kind, r.Value, got, golden[kind], strings.Join(want, "\n"))
		}
	}
}

// wireGoldenShapes returns the structure of every line of a golden file.
func wireGoldenShapes(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "wire", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, wireShape(sc.Bytes()))
	}
	return out
}

// wireShape describes a record value by its members, in order, and their
// JSON types, one level into "source"; the row, key, id and document
// objects are described only as objects, their contents being the
// table's.
func wireShape(value []byte) string {
	dec := json.NewDecoder(strings.NewReader(string(value)))
	dec.UseNumber()
	var b strings.Builder
	var walk func(prefix string, depth int) error
	walk = func(prefix string, depth int) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				if depth > 0 && prefix != "source" {
					fmt.Fprintf(&b, "%s:object ", prefix)
					return wireSkip(dec)
				}
				for dec.More() {
					k, err := dec.Token()
					if err != nil {
						return err
					}
					name := fmt.Sprint(k)
					if prefix != "" {
						name = prefix + "." + name
					}
					if err := walk(name, depth+1); err != nil {
						return err
					}
				}
				_, err = dec.Token()
				return err
			case '[':
				fmt.Fprintf(&b, "%s:array ", prefix)
				return wireSkip(dec)
			}
		case json.Number:
			fmt.Fprintf(&b, "%s:number ", prefix)
		case string:
			fmt.Fprintf(&b, "%s:string ", prefix)
		case bool:
			fmt.Fprintf(&b, "%s:bool ", prefix)
		case nil:
			fmt.Fprintf(&b, "%s:null ", prefix)
		}
		return nil
	}
	if err := walk("", 0); err != nil {
		return "invalid JSON: " + err.Error()
	}
	return strings.TrimSpace(b.String())
}

// wireSkip skips the rest of an object or array whose opening delimiter
// was read.
func wireSkip(dec *json.Decoder) error {
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

// gathered is the value of the counter or gauge name in reg (summed over
// its labels), 0 when reg has none.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// newWirePipeline runs stream, map and build on the wire schema and
// mapping, with the stages' metrics in the returned registry.
func newWirePipeline(t *testing.T) (*resEnv, *prometheus.Registry) {
	e := newResEnv(t, wireSchema, wireMapping)
	reg := prometheus.NewRegistry()
	e.cfg.Registerer = reg
	e.startStreamer()
	e.startMapper("map")
	e.startBuilder("build")
	return e, reg
}
