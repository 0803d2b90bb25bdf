package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/resolver"
)

// resShopSchema has 8 tables: a root with many-to-one (address), one-to-one
// (profile), one-to-many over three levels (orders → lines → product) and
// many-to-many (tags through customer_tags); products are the root of a
// second aggregate that walks the same links the other way. Every table
// has REPLICA IDENTITY FULL.
const resShopSchema = `
CREATE TABLE addresses (id int PRIMARY KEY, city text NOT NULL);
CREATE TABLE products (id int PRIMARY KEY, sku text NOT NULL, title text, price numeric(10,2));
CREATE TABLE tags (id int PRIMARY KEY, name text NOT NULL);
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, email text, note text,
  address_id int REFERENCES addresses(id) ON DELETE SET NULL);
CREATE TABLE profiles (customer_id int PRIMARY KEY REFERENCES customers(id) ON DELETE CASCADE ON UPDATE CASCADE, bio text);
CREATE TABLE orders (id int PRIMARY KEY, customer_id int REFERENCES customers(id) ON DELETE CASCADE ON UPDATE CASCADE,
  status text, total numeric(12,2), placed_at timestamptz NOT NULL);
CREATE TABLE order_lines (id int PRIMARY KEY, order_id int NOT NULL REFERENCES orders(id) ON DELETE CASCADE,
  product_id int REFERENCES products(id), qty int);
CREATE TABLE customer_tags (customer_id int REFERENCES customers(id) ON DELETE CASCADE ON UPDATE CASCADE,
  tag_id int REFERENCES tags(id) ON DELETE CASCADE, PRIMARY KEY (customer_id, tag_id));
CREATE INDEX ON customers (address_id);
CREATE INDEX ON orders (customer_id);
CREATE INDEX ON order_lines (order_id);
CREATE INDEX ON order_lines (product_id);
CREATE INDEX ON customer_tags (tag_id);
` + testenv.AllReplicaIdentityFull

const resShopMapping = `version: 1
aggregates:
  customer:
    table: customers
    columns: [id, name, email, address_id]
    where: note IS NULL OR note NOT LIKE 'slate%'
    fields:
      note_len: length(note)
      order_count: {count: orders}
      last_order_at: {max: orders.placed_at}
      spent: {sum: orders.total}
    elasticsearch: {index: IDX_customer}
    relations:
      address: {table: addresses, references: address_id}
      profile: {table: profiles, foreign_key: customer_id, single: true, columns: [bio]}
      orders:
        table: orders
        foreign_key: customer_id
        columns: [id, status, total, placed_at]
        where: status NOT LIKE 'red%'
        fields:
          line_count: {count: lines}
        order_by: placed_at desc
        relations:
          lines:
            table: order_lines
            foreign_key: order_id
            columns: [id, qty]
            relations:
              product: {table: products, references: product_id, columns: [id, sku, title]}
      tags:
        table: tags
        through: {table: customer_tags, foreign_key: customer_id, references: tag_id}
        value: name
        where: name NOT LIKE 'plum%'
  product:
    table: products
    where: title IS NULL OR title NOT LIKE 'blue%'
    elasticsearch: {index: IDX_product}
    relations:
      lines:
        table: order_lines
        foreign_key: product_id
        columns: [id, qty]
        relations:
          order: {table: orders, references: order_id, columns: [id, status]}
`

// The oracles compute the documents by hand, independently of the
// generated SQL: to_jsonb of rows, explicit orderings, and the mapping's
// filters (where:) as plain conditions — customers whose note starts with
// slate, products whose title starts with blue have no document; orders
// whose status starts with red and tags whose name starts with plum are
// left out of the customer's; and the computed fields (fields:) as plain
// subqueries.
const resCustomerOracle = `
SELECT '{"id":' || c.id || '}', jsonb_build_object(
  'id', c.id, 'name', c.name, 'email', c.email, 'address_id', c.address_id, 'note_len', length(c.note),
  'order_count', (SELECT count(*) FROM orders o WHERE o.customer_id = c.id AND o.status NOT LIKE 'red%'),
  'last_order_at', (SELECT max(o.placed_at) FROM orders o WHERE o.customer_id = c.id AND o.status NOT LIKE 'red%'),
  'spent', (SELECT sum(o.total) FROM orders o WHERE o.customer_id = c.id AND o.status NOT LIKE 'red%'),
  'address', (SELECT to_jsonb(a) FROM addresses a WHERE a.id = c.address_id),
  'profile', (SELECT jsonb_build_object('bio', p.bio) FROM profiles p WHERE p.customer_id = c.id),
  'orders', COALESCE((
     SELECT jsonb_agg((to_jsonb(o) - 'customer_id') || jsonb_build_object(
        'line_count', (SELECT count(*) FROM order_lines l WHERE l.order_id = o.id),
        'lines', COALESCE((
        SELECT jsonb_agg(jsonb_build_object('id', l.id, 'qty', l.qty,
                 'product', (SELECT jsonb_build_object('id', p.id, 'sku', p.sku, 'title', p.title) FROM products p WHERE p.id = l.product_id))
               ORDER BY l.id)
        FROM order_lines l WHERE l.order_id = o.id), '[]'::jsonb)) ORDER BY o.placed_at DESC, o.id)
     FROM orders o WHERE o.customer_id = c.id AND o.status NOT LIKE 'red%'), '[]'::jsonb),
  'tags', COALESCE((SELECT jsonb_agg(t.name ORDER BY t.id) FROM customer_tags ct JOIN tags t ON t.id = ct.tag_id
                    WHERE ct.customer_id = c.id AND t.name NOT LIKE 'plum%'), '[]'::jsonb))
FROM customers c
WHERE c.note IS NULL OR c.note NOT LIKE 'slate%'`

const resProductOracle = `
SELECT '{"id":' || p.id || '}', to_jsonb(p) || jsonb_build_object('lines', COALESCE((
  SELECT jsonb_agg(jsonb_build_object('id', l.id, 'qty', l.qty,
           'order', (SELECT jsonb_build_object('id', o.id, 'status', o.status) FROM orders o WHERE o.id = l.order_id))
         ORDER BY l.id)
  FROM order_lines l WHERE l.product_id = p.id), '[]'::jsonb))
FROM products p
WHERE p.title IS NULL OR p.title NOT LIKE 'blue%'`

// resIDs is a set of ids with O(1) random picks.
type resIDs struct {
	list []int
	pos  map[int]int
}

func (s *resIDs) add(id int) {
	if s.pos == nil {
		s.pos = map[int]int{}
	}
	if _, ok := s.pos[id]; ok {
		return
	}
	s.pos[id] = len(s.list)
	s.list = append(s.list, id)
}

func (s *resIDs) remove(id int) {
	i, ok := s.pos[id]
	if !ok {
		return
	}
	last := s.list[len(s.list)-1]
	s.list[i] = last
	s.pos[last] = i
	s.list = s.list[:len(s.list)-1]
	delete(s.pos, id)
}

func (s *resIDs) pick(r *rand.Rand) (int, bool) {
	if len(s.list) == 0 {
		return 0, false
	}
	return s.list[r.IntN(len(s.list))], true
}

// resShop is the workload's view of the database.
type resShop struct {
	r                                                   *rand.Rand
	next                                                int
	customers, orders, lines, products, addresses, tags resIDs
	links                                               map[[2]int]bool
	linkList                                            [][2]int
	ops, failed, reloads                                int
}

func (s *resShop) id() int { s.next++; return s.next }

// reload reads every id from the database (after cascades and truncates).
func (s *resShop) reload(ctx context.Context, tx pgx.Tx) error {
	s.reloads++
	for _, x := range []struct {
		set   *resIDs
		table string
	}{{&s.customers, "customers"}, {&s.orders, "orders"}, {&s.lines, "order_lines"}, {&s.products, "products"}, {&s.addresses, "addresses"}, {&s.tags, "tags"}} {
		*x.set = resIDs{}
		rows, err := tx.Query(ctx, "SELECT id FROM "+x.table)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int
			if err := rows.Scan(&id); err != nil {
				return err
			}
			x.set.add(id)
		}
		if rows.Err() != nil {
			return rows.Err()
		}
	}
	s.links, s.linkList = map[[2]int]bool{}, nil
	rows, err := tx.Query(ctx, "SELECT customer_id, tag_id FROM customer_tags")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var l [2]int
		if err := rows.Scan(&l[0], &l[1]); err != nil {
			return err
		}
		s.links[l] = true
		s.linkList = append(s.linkList, l)
	}
	return rows.Err()
}

func (s *resShop) word() string {
	words := []string{"red", "blue", "green", "amber", "ivory", "slate", "coral", "olive", "teal", "plum"}
	return words[s.r.IntN(len(words))] + "-" + strconv.Itoa(s.r.IntN(1000))
}

func (s *resShop) orNull(set *resIDs, pNull float64) any {
	if s.r.Float64() < pNull {
		return nil
	}
	if id, ok := set.pick(s.r); ok {
		return id
	}
	return nil
}

// op runs one random operation in tx. It returns whether the in-memory
// sets must be reloaded (cascades).
func (s *resShop) op(ctx context.Context, tx pgx.Tx) (reload bool, err error) {
	exec := func(sql string, args ...any) error { _, err := tx.Exec(ctx, sql, args...); return err }
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(s.r.IntN(1000)) * time.Hour)
	switch n := s.r.IntN(100); {
	case n < 8: // insert customer
		id := s.id()
		s.customers.add(id)
		return false, exec(`INSERT INTO customers (id, name, email, note, address_id) VALUES ($1, $2, $3, $4, $5)`, id, s.word(), s.word()+"@x.test", s.word(), s.orNull(&s.addresses, 0.2))
	case n < 14: // rename customer (watched)
		if id, ok := s.customers.pick(s.r); ok {
			return false, exec(`UPDATE customers SET name = $2 WHERE id = $1`, id, s.word())
		}
	case n < 18: // change an unmapped column the root filter reads: a customer leaves or joins the index
		if id, ok := s.customers.pick(s.r); ok {
			return false, exec(`UPDATE customers SET note = $2 WHERE id = $1`, id, s.word())
		}
	case n < 22: // move customer to another address (many-to-one link)
		if id, ok := s.customers.pick(s.r); ok {
			return false, exec(`UPDATE customers SET address_id = $2 WHERE id = $1`, id, s.orNull(&s.addresses, 0.2))
		}
	case n < 24: // delete customer (root delete, cascades)
		if id, ok := s.customers.pick(s.r); ok {
			return true, exec(`DELETE FROM customers WHERE id = $1`, id)
		}
	case n < 25: // root key change (cascades to children)
		if id, ok := s.customers.pick(s.r); ok {
			return true, exec(`UPDATE customers SET id = $2 WHERE id = $1`, id, s.id())
		}
	case n < 33: // insert order
		if c, ok := s.customers.pick(s.r); ok {
			id := s.id()
			s.orders.add(id)
			return false, exec(`INSERT INTO orders (id, customer_id, status, total, placed_at) VALUES ($1, $2, 'new', $3, $4)`, id, c, fmt.Sprintf("%d.%02d", s.r.IntN(500), s.r.IntN(100)), ts)
		}
	case n < 38: // update order
		if id, ok := s.orders.pick(s.r); ok {
			return false, exec(`UPDATE orders SET status = $2, placed_at = $3 WHERE id = $1`, id, s.word(), ts)
		}
	case n < 42: // move order to another customer (one-to-many FK move)
		if id, ok := s.orders.pick(s.r); ok {
			if c, ok := s.customers.pick(s.r); ok {
				return false, exec(`UPDATE orders SET customer_id = $2 WHERE id = $1`, id, c)
			}
		}
	case n < 44: // delete order (cascades to lines)
		if id, ok := s.orders.pick(s.r); ok {
			return true, exec(`DELETE FROM orders WHERE id = $1`, id)
		}
	case n < 54: // insert line
		if o, ok := s.orders.pick(s.r); ok {
			id := s.id()
			s.lines.add(id)
			return false, exec(`INSERT INTO order_lines (id, order_id, product_id, qty) VALUES ($1, $2, $3, $4)`, id, o, s.orNull(&s.products, 0.1), s.r.IntN(9)+1)
		}
	case n < 59: // update line qty
		if id, ok := s.lines.pick(s.r); ok {
			return false, exec(`UPDATE order_lines SET qty = $2 WHERE id = $1`, id, s.r.IntN(9)+1)
		}
	case n < 63: // move line to another order (second-level FK move)
		if id, ok := s.lines.pick(s.r); ok {
			if o, ok := s.orders.pick(s.r); ok {
				return false, exec(`UPDATE order_lines SET order_id = $2 WHERE id = $1`, id, o)
			}
		}
	case n < 66: // point line at another product
		if id, ok := s.lines.pick(s.r); ok {
			return false, exec(`UPDATE order_lines SET product_id = $2 WHERE id = $1`, id, s.orNull(&s.products, 0.1))
		}
	case n < 69: // delete line
		if id, ok := s.lines.pick(s.r); ok {
			s.lines.remove(id)
			return false, exec(`DELETE FROM order_lines WHERE id = $1`, id)
		}
	case n < 71: // insert product
		id := s.id()
		s.products.add(id)
		return false, exec(`INSERT INTO products (id, sku, title, price) VALUES ($1, $2, $3, $4)`, id, "sku-"+strconv.Itoa(id), s.word(), "9.99")
	case n < 75: // update product (fans out to every customer who ordered it)
		if id, ok := s.products.pick(s.r); ok {
			return false, exec(`UPDATE products SET title = $2 WHERE id = $1`, id, s.word())
		}
	case n < 77: // insert address
		id := s.id()
		s.addresses.add(id)
		return false, exec(`INSERT INTO addresses (id, city) VALUES ($1, $2)`, id, s.word())
	case n < 80: // update address
		if id, ok := s.addresses.pick(s.r); ok {
			return false, exec(`UPDATE addresses SET city = $2 WHERE id = $1`, id, s.word())
		}
	case n < 81: // insert tag
		id := s.id()
		s.tags.add(id)
		return false, exec(`INSERT INTO tags (id, name) VALUES ($1, $2)`, id, s.word())
	case n < 83: // rename tag (many-to-many child)
		if id, ok := s.tags.pick(s.r); ok {
			return false, exec(`UPDATE tags SET name = $2 WHERE id = $1`, id, s.word())
		}
	case n < 89: // link customer and tag (join churn)
		c, ok1 := s.customers.pick(s.r)
		tg, ok2 := s.tags.pick(s.r)
		if ok1 && ok2 && !s.links[[2]int{c, tg}] {
			s.links[[2]int{c, tg}] = true
			s.linkList = append(s.linkList, [2]int{c, tg})
			return false, exec(`INSERT INTO customer_tags (customer_id, tag_id) VALUES ($1, $2)`, c, tg)
		}
	case n < 93: // unlink, or move a link to another customer
		if len(s.linkList) > 0 {
			i := s.r.IntN(len(s.linkList))
			l := s.linkList[i]
			s.linkList[i] = s.linkList[len(s.linkList)-1]
			s.linkList = s.linkList[:len(s.linkList)-1]
			delete(s.links, l)
			if c, ok := s.customers.pick(s.r); ok && s.r.IntN(2) == 0 && !s.links[[2]int{c, l[1]}] {
				s.links[[2]int{c, l[1]}] = true
				s.linkList = append(s.linkList, [2]int{c, l[1]})
				return false, exec(`UPDATE customer_tags SET customer_id = $3 WHERE customer_id = $1 AND tag_id = $2`, l[0], l[1], c)
			}
			return false, exec(`DELETE FROM customer_tags WHERE customer_id = $1 AND tag_id = $2`, l[0], l[1])
		}
	case n < 97: // upsert profile (one-to-one)
		if c, ok := s.customers.pick(s.r); ok {
			return false, exec(`INSERT INTO profiles (customer_id, bio) VALUES ($1, $2) ON CONFLICT (customer_id) DO UPDATE SET bio = EXCLUDED.bio`, c, s.word())
		}
	default: // delete profile
		if c, ok := s.customers.pick(s.r); ok {
			return false, exec(`DELETE FROM profiles WHERE customer_id = $1`, c)
		}
	}
	return false, nil
}

// resSeed fills the shop with a starting data set.
func resSeed(t *testing.T, e *resEnv, scale int) {
	e.pg.Exec(t, fmt.Sprintf(`
INSERT INTO addresses SELECT g, 'city-' || g FROM generate_series(1, %[1]d) g;
INSERT INTO products SELECT g, 'sku-' || g, 'title-' || g, 1.5 * g FROM generate_series(1, %[1]d) g;
INSERT INTO tags SELECT g, 'tag-' || g FROM generate_series(1, 30) g;
INSERT INTO customers SELECT g, 'name-' || g, 'c' || g || '@x.test', 'note', 1 + g %% %[1]d FROM generate_series(1, %[2]d) g;
INSERT INTO profiles SELECT g, 'bio-' || g FROM generate_series(1, %[2]d, 3) g;
INSERT INTO orders SELECT g, 1 + g %% %[2]d, 'new', g %% 97, timestamptz '2026-01-01 00:00:00+00' + g * interval '1 minute' FROM generate_series(1, %[3]d) g;
INSERT INTO order_lines SELECT g, 1 + g %% %[3]d, 1 + g %% %[1]d, 1 + g %% 5 FROM generate_series(1, %[4]d) g;
INSERT INTO customer_tags SELECT c, t FROM generate_series(1, %[2]d) c, generate_series(1, 30) t WHERE (c + t) %% 11 = 0;
ANALYZE;
`, scale, 2*scale, 6*scale, 15*scale))
}

// TestResolverDifferential runs a random workload of inserts, updates,
// deletes, foreign key moves, join churn, root key changes, root deletes
// and TRUNCATEs through streamer → map → build → Kafka and Elasticsearch
// sinks, with a second builder joining (rebalance), the first leaving and
// the map stage restarting mid-workload; then it compares every document
// in the aggregate topics and in Elasticsearch with an oracle query.
// DECANT_RESOLVER_OPS sets the number of operations (default 20000;
// 100000 with DECANT_HEAVY=1, as in make test-heavy).
func TestResolverDifferential(t *testing.T) { resDifferential(t, 20000, "elasticsearch") }

// TestResolverDifferentialOpenSearch is TestResolverDifferential with
// OpenSearch as the only search sink (issue 17), at half the operations.
func TestResolverDifferentialOpenSearch(t *testing.T) { resDifferential(t, 10000, "opensearch") }

// TestResolverDifferentialBothEngines is TestResolverDifferential with
// Elasticsearch and OpenSearch written at once, each compared with the
// oracle, at half the operations.
func TestResolverDifferentialBothEngines(t *testing.T) {
	resDifferential(t, 10000, "elasticsearch", "opensearch")
}

// TestResolverDifferentialOnStandby is acceptance 2 of issue 16: the
// streamer, map and build stages all read a hot standby (PostgreSQL 16+)
// while the workload writes to the primary; documents equal the oracle
// run on the primary, and versions never go back. It runs where a standby
// is configured (make test-pg starts one; testenv.Standby), at a quarter of
// the operations.
func TestResolverDifferentialOnStandby(t *testing.T) {
	testenv.StandbyVersion(t)
	resDifferentialOn(t, 5000, true, "elasticsearch")
}

func resDifferential(t *testing.T, defaultOps int, engines ...string) {
	resDifferentialOn(t, defaultOps, false, engines...)
}

// resDifferentialOn is the differential test; standby runs the stages on
// a hot standby of the database (useStandby).
func resDifferentialOn(t *testing.T, defaultOps int, standby bool, engines ...string) {
	ops := resSize("DECANT_RESOLVER_OPS", defaultOps, 100000)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("DECANT_RESOLVER_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (DECANT_RESOLVER_SEED), %d operations, search engines %v, on a standby: %v", seed, ops, engines, standby)
	e := newResEnvOn(t, resShopSchema, resShopMapping, engines...)
	ctx := testenv.Ctx(t)
	resSeed(t, e, 100)
	if standby {
		e.useStandby()
	}
	e.startStreamer()
	e.startMapper("map")
	e.startBuilder("build")

	// The first start backfills: every root id through the refs topic.
	for _, a := range []string{"customer", "product"} {
		bf := resBackfill(ctx, t, e.cfg, e.pool, e.model, a, 2*time.Minute)
		if need, err := resolver.NeedsBackfill(ctx, e.cfg, a); err != nil || need {
			t.Errorf("NeedsBackfill(%s) after a backfill = %v, %v; want false", a, need, err)
		}
		t.Logf("backfill %s: %d ids", a, bf.Count)
	}

	shop := &resShop{r: rand.New(rand.NewPCG(seed, 1)), next: 1_000_000}
	started := time.Now()
	truncated := map[int]string{ops / 10: "TRUNCATE order_lines", ops / 4: "TRUNCATE customers CASCADE"}
	events := map[int]func(){
		ops / 2:     func() { e.startBuilder("build2") }, // rebalance: a second builder joins
		ops * 3 / 5: func() { e.stop("map"); e.startMapper("map") },
		ops * 3 / 4: func() { e.stop("build") }, // rebalance: the first leaves
	}
	done := resRunWorkload(t, e, shop, ops, nil, truncated, events)
	t.Logf("workload: %d operations in %s (%d transactions rolled back, %d reloads)", done, time.Since(started).Round(time.Millisecond), shop.failed, shop.reloads)
	quiet := time.Now()
	e.waitQuiet(3 * time.Minute)
	t.Logf("quiet %s after the workload", time.Since(quiet).Round(time.Millisecond))
	e.compare(t)

	// Replaying every ref ever produced rebuilds documents with newer
	// versions; nothing regresses and the documents stay equal.
	_, refs := e.topics()
	replayed := e.replay(t, refs)
	e.waitQuiet(2 * time.Minute)
	t.Logf("replayed %d refs", replayed)
	e.compare(t)
}

// compare checks both sinks of both aggregates against the oracles and
// the version checker; it reports every problem.
func (e *resEnv) compare(t *testing.T) {
	t.Helper()
	var problems []string
	for _, x := range []struct{ agg, oracle string }{{"customer", resCustomerOracle}, {"product", resProductOracle}} {
		want := e.oracleState(x.oracle)
		topic, vp := e.aggTopicState(x.agg)
		problems = append(problems, vp...)
		problems = append(problems, resDiff(x.agg+" topic", topic, want)...)
		t.Logf("%s: %d documents in the oracle, %d in the topic", x.agg, len(want), len(topic))
		for _, en := range e.engines {
			search := e.searchState(en, x.agg, func(id string) string { return `{"id":` + id + `}` })
			problems = append(problems, resDiff(x.agg+" "+en.env.Kind, search, want)...)
			t.Logf("%s: %d documents in %s", x.agg, len(search), en.env.Kind)
		}
	}
	e.check.mu.Lock()
	problems = append(problems, e.check.violations...)
	t.Logf("version checker: %d writes, %d violations", e.check.writes, len(e.check.violations))
	e.check.mu.Unlock()
	resReport(t, problems)
}

// replay re-produces every record of topics into the same topics.
func (e *resEnv) replay(t *testing.T, topics []string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(testenv.Ctx(t), time.Minute)
	defer cancel()
	n := 0
	for _, topic := range topics {
		var recs []*kgo.Record
		for _, r := range e.k.Records(t, topic) {
			recs = append(recs, &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value})
		}
		if err := e.k.Client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		n += len(recs)
	}
	return n
}
