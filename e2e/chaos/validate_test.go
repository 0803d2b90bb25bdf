package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// The oracles build each document by hand from the tables, independently
// of the SQL decant generates: explicit joins, explicit orderings (the
// mapping's order_by, then the primary key), '[]' for empty arrays and
// null for a missing many-to-one row. Keys are the aggregate id objects.
const customerOracle = `
SELECT jsonb_build_object('id', c.id), jsonb_build_object(
  'id', c.id, 'name', c.name, 'email', c.email, 'signed_up_at', c.created_at,
  'address', (SELECT jsonb_build_object('street', a.street, 'city', a.city, 'country', a.country)
              FROM addresses a WHERE a.id = c.address_id),
  'tags', COALESCE((SELECT jsonb_agg(t.name ORDER BY t.id)
                    FROM customer_tags ct JOIN tags t ON t.id = ct.tag_id WHERE ct.customer_id = c.id), '[]'),
  'orders', COALESCE((
    SELECT jsonb_agg(jsonb_build_object('id', o.id, 'total', o.total, 'status', o.status, 'placed_at', o.placed_at,
      'lines', COALESCE((
        SELECT jsonb_agg(jsonb_build_object('line_no', l.line_no, 'quantity', l.quantity,
          'product', (SELECT jsonb_build_object('id', p.id, 'sku', p.sku, 'title', p.title, 'price', p.price)
                      FROM products p WHERE p.id = l.product_id)) ORDER BY l.line_no)
        FROM order_lines l WHERE l.order_id = o.id), '[]')) ORDER BY o.placed_at DESC, o.id)
    FROM orders o WHERE o.customer_id = c.id), '[]'))
FROM customers c`

const orderOracle = `
SELECT jsonb_build_object('id', o.id), jsonb_build_object(
  'id', o.id, 'status', o.status, 'total', o.total, 'placed_at', o.placed_at,
  'customer', (SELECT jsonb_build_object('id', c.id, 'name', c.name, 'email', c.email)
               FROM customers c WHERE c.id = o.customer_id),
  'lines', COALESCE((
    SELECT jsonb_agg(jsonb_build_object('line_no', l.line_no, 'quantity', l.quantity,
      'product', (SELECT jsonb_build_object('sku', p.sku, 'price', p.price) FROM products p WHERE p.id = l.product_id))
      ORDER BY l.quantity DESC, l.order_id, l.line_no)
    FROM order_lines l WHERE l.order_id = o.id), '[]'))
FROM orders o`

// shopTables are the published tables and their primary keys.
var shopTables = map[string][]string{
	"addresses": {"id"}, "customers": {"id"}, "products": {"id"}, "orders": {"id"},
	"order_lines": {"order_id", "line_no"}, "tags": {"id"}, "customer_tags": {"customer_id", "tag_id"},
}

// aggregates: name → oracle.
var aggregates = map[string]string{"customer": customerOracle, "order": orderOracle}

// validator compares the sinks and the raw topics with the database.
type validator struct {
	pool    *pgxpool.Pool // TimeZone=UTC, like decant's sessions
	adm     *kadm.Client
	brokers []string
	prefix  string // topic prefix
	esURL   string
	alias   func(aggregate string) string
}

// result is one validation.
type result struct {
	mismatches []string
	rawDups    int // raw records seen again with the same (commit_lsn, seq)
	aggDups    int // aggregate records seen again with the same version
	counts     []string
}

func (r *result) add(format string, args ...any) {
	r.mismatches = append(r.mismatches, fmt.Sprintf(format, args...))
}

// canon re-encodes JSON with sorted keys and numbers as written.
func canon(b []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return string(out), err
}

func mustCanon(b []byte) string {
	s, err := canon(b)
	if err != nil {
		return "<invalid JSON " + strconv.Quote(string(b)) + ">"
	}
	return s
}

// validate runs every check once. It errors only when it could not read
// something (a server is unreachable); differences are in the result.
func (v *validator) validate(ctx context.Context) (*result, error) {
	r := &result{}
	for _, agg := range sortedKeys(aggregates) {
		want, err := v.query(ctx, aggregates[agg])
		if err != nil {
			return nil, fmt.Errorf("oracle of %s: %w", agg, err)
		}
		topic, err := v.aggTopic(ctx, agg, r)
		if err != nil {
			return nil, err
		}
		es, err := v.esDocs(ctx, v.alias(agg), true)
		if err != nil {
			return nil, err
		}
		search := map[string]string{}
		for id, d := range es {
			search[id] = d.source
		}
		diff(r, agg+" aggregate topic", topic, want)
		diff(r, agg+" elasticsearch", search, want)
		r.counts = append(r.counts, fmt.Sprintf("%s: %d in the database, %d in the topic, %d in Elasticsearch", agg, len(want), len(topic), len(search)))
	}
	for _, table := range sortedKeys(shopTables) {
		want, err := v.query(ctx, fmt.Sprintf(`SELECT jsonb_build_object(%s), to_jsonb(t) FROM %s t`, keyArgs(shopTables[table]), table))
		if err != nil {
			return nil, fmt.Errorf("rows of %s: %w", table, err)
		}
		got, err := v.rawTopic(ctx, table, r)
		if err != nil {
			return nil, err
		}
		diff(r, "raw "+table, got, want)
		r.counts = append(r.counts, fmt.Sprintf("%s: %d rows, %d keys in the raw topic", table, len(want), len(got)))
	}
	sort.Strings(r.mismatches)
	return r, nil
}

func keyArgs(cols []string) string {
	var parts []string
	for _, c := range cols {
		parts = append(parts, "'"+c+"', t."+c)
	}
	return strings.Join(parts, ", ")
}

// diff records every key missing, extra or different in got.
func diff(r *result, where string, got, want map[string]string) {
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			r.add("%s: %s missing", where, k)
		case g != w:
			r.add("%s: %s differs:\n      got  %s\n      want %s", where, k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			r.add("%s: %s present, but not in the database", where, k)
		}
	}
}

// query runs (key jsonb, value jsonb) rows into canonical strings.
func (v *validator) query(ctx context.Context, sql string) (map[string]string, error) {
	rows, err := v.pool.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, d []byte
		if err := rows.Scan(&k, &d); err != nil {
			return nil, err
		}
		out[mustCanon(k)] = mustCanon(d)
	}
	return out, rows.Err()
}

// readTopic returns every record of topic, partition by partition in
// offset order, up to the end offsets read first.
func (v *validator) readTopic(ctx context.Context, topic string) (map[int32][]*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	recs, err := testenv.ReadTopic(ctx, v.adm, v.brokers, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32][]*kgo.Record{}
	for _, r := range recs {
		out[r.Partition] = append(out[r.Partition], r)
	}
	return out, nil
}

// aggTopic folds <prefix>.agg.<aggregate> into the last document per key.
// A version lower than an earlier one of the same key is a mismatch (a
// regression); a record repeating a key's version is a duplicate.
func (v *validator) aggTopic(ctx context.Context, agg string, r *result) (map[string]string, error) {
	topic := wire.AggTopic(v.prefix, agg)
	parts, err := v.readTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	state := map[string]string{}
	for _, recs := range parts {
		last := map[string]uint64{}
		seen := map[string]bool{}
		for _, rec := range recs {
			k := mustCanon(rec.Key)
			if rec.Value == nil {
				delete(state, k)
				continue
			}
			var env struct {
				Version *uint64         `json:"version"`
				Deleted bool            `json:"deleted"`
				Doc     json.RawMessage `json:"doc"`
			}
			if err := json.Unmarshal(rec.Value, &env); err != nil || env.Version == nil {
				r.add("%s: %s offset %d: not a document envelope: %.200s", topic, k, rec.Offset, rec.Value)
				continue
			}
			if prev, ok := last[k]; ok && *env.Version < prev {
				r.add("%s: %s version went back from %d to %d at offset %d", topic, k, prev, *env.Version, rec.Offset)
			}
			last[k] = max(last[k], *env.Version)
			id := fmt.Sprintf("%s %d %t", k, *env.Version, env.Deleted)
			if seen[id] {
				r.aggDups++
			}
			seen[id] = true
			if env.Deleted {
				delete(state, k)
			} else {
				state[k] = mustCanon(env.Doc)
			}
		}
	}
	return state, nil
}

// rawTopic folds <prefix>.raw.public.<table> into the row per key that
// its last record gives (what compaction keeps), dropping rows older than
// the table's last TRUNCATE. A record with the same (commit_lsn, seq, op)
// as an earlier one of its key is a duplicate.
func (v *validator) rawTopic(ctx context.Context, table string, r *result) (map[string]string, error) {
	topic := wire.RawTopic(v.prefix, "public", table)
	parts, err := v.readTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	type row struct {
		after string // "" when deleted
		pos   position
	}
	rows := map[string]row{}
	var truncated position
	for _, recs := range parts {
		seen := map[string]bool{}
		for _, rec := range recs {
			k := mustCanon(rec.Key)
			if rec.Value == nil { // tombstone after a delete
				pos := rows[k].pos
				rows[k] = row{pos: pos}
				continue
			}
			var ch struct {
				Op     string          `json:"op"`
				After  json.RawMessage `json:"after"`
				Source struct {
					CommitLSN string `json:"commit_lsn"`
					Seq       uint64 `json:"seq"`
				} `json:"source"`
			}
			if err := json.Unmarshal(rec.Value, &ch); err != nil {
				r.add("%s: %s offset %d: not a change event: %.200s", topic, k, rec.Offset, rec.Value)
				continue
			}
			lsn, err := wire.ParseLSN(ch.Source.CommitLSN)
			if err != nil {
				r.add("%s: %s offset %d: %v", topic, k, rec.Offset, err)
				continue
			}
			pos := position{lsn, ch.Source.Seq}
			id := fmt.Sprintf("%s %s %d %s", k, ch.Source.CommitLSN, ch.Source.Seq, ch.Op)
			if seen[id] {
				r.rawDups++
			}
			seen[id] = true
			switch ch.Op {
			case "t":
				if truncated.less(pos) {
					truncated = pos
				}
			case "d":
				rows[k] = row{pos: pos}
			default:
				rows[k] = row{after: mustCanon(ch.After), pos: pos}
			}
		}
	}
	out := map[string]string{}
	for k, rw := range rows {
		if rw.after != "" && truncated.less(rw.pos) {
			out[k] = rw.after
		}
	}
	return out, nil
}

// position orders changes: (commit LSN, seq in the transaction).
type position struct{ lsn, seq uint64 }

func (p position) less(q position) bool { return p.lsn < q.lsn || (p.lsn == q.lsn && p.seq < q.seq) }

// esDoc is one Elasticsearch document.
type esDoc struct {
	version int64
	source  string // canonical JSON
}

// esDocs reads every document of alias (after a refresh), keyed by the
// aggregate id object built from _id (ids are single integer columns).
func (v *validator) esDocs(ctx context.Context, alias string, source bool) (map[string]esDoc, error) {
	hits, err := testenv.ESHits(ctx, v.esURL, alias, source)
	if err != nil {
		return nil, err
	}
	out := map[string]esDoc{}
	for _, h := range hits {
		d := esDoc{version: h.Version}
		if source {
			d.source = mustCanon(h.Source)
		}
		out[`{"id":`+h.ID+`}`] = d
	}
	return out, nil
}

// versionWatch samples the Elasticsearch versions of every document while
// the faults run: a version lower than one seen earlier for the same id is
// a regression (PRODUCT.md §6.3). Samples that fail (the node is
// restarting) are skipped.
type versionWatch struct {
	mu         sync.Mutex
	max        map[string]int64
	violations []string
	samples    int
}

func (w *versionWatch) run(ctx context.Context, v *validator, every time.Duration) {
	w.max = map[string]int64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		for _, agg := range sortedKeys(aggregates) {
			docs, err := v.esDocs(ctx, v.alias(agg), false)
			if err != nil {
				continue
			}
			w.mu.Lock()
			w.samples++
			for id, d := range docs {
				k := agg + " " + id
				if prev := w.max[k]; d.version < prev {
					w.violations = append(w.violations, fmt.Sprintf("elasticsearch %s %s: version went back from %d to %d", agg, id, prev, d.version))
				}
				w.max[k] = max(w.max[k], d.version)
			}
			w.mu.Unlock()
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
