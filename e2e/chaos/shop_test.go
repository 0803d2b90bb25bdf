package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/internal/testenv"
)

// shopCascades are the foreign keys of examples/shop/schema.sql that a
// workload which deletes parents and changes root keys needs to cascade,
// with the actions they get.
var shopCascades = []struct{ table, column, refs, actions string }{
	{"customers", "address_id", "addresses", "ON DELETE SET NULL"},
	{"orders", "customer_id", "customers", "ON DELETE CASCADE ON UPDATE CASCADE"},
	{"order_lines", "order_id", "orders", "ON DELETE CASCADE ON UPDATE CASCADE"},
	{"order_lines", "product_id", "products", "ON DELETE CASCADE"},
	{"customer_tags", "customer_id", "customers", "ON DELETE CASCADE ON UPDATE CASCADE"},
}

// shopSchema is the DDL of examples/shop/schema.sql with shopCascades.
func shopSchema(tb testing.TB) string {
	var b strings.Builder
	b.WriteString(testenv.ShopDDL(tb))
	for _, c := range shopCascades {
		fmt.Fprintf(&b, "ALTER TABLE %[1]s DROP CONSTRAINT %[1]s_%[2]s_fkey, ADD FOREIGN KEY (%[2]s) REFERENCES %[3]s(id) %[4]s;\n",
			c.table, c.column, c.refs, c.actions)
	}
	return b.String()
}

// shopSeed fills the shop; %[1]d is the number of customers.
const shopSeed = `
INSERT INTO addresses (street, city, country)
SELECT g || ' Market Street', (ARRAY['Berlin','Paris','Lisbon','Oslo','Rome','Madrid','Vienna','Dublin'])[1 + g %% 8],
       (ARRAY['DE','FR','PT','NO','IT','ES','AT','IE'])[1 + g %% 8]
FROM generate_series(1, %[1]d * 3 / 4) g;
INSERT INTO customers (name, email, address_id, created_at)
SELECT 'customer ' || g, 'customer' || g || '@example.com', CASE WHEN g %% 5 = 0 THEN NULL ELSE 1 + g %% (%[1]d * 3 / 4) END,
       '2026-01-01'::timestamptz + g * interval '37 minutes'
FROM generate_series(1, %[1]d) g;
INSERT INTO products (sku, title, price)
SELECT 'SKU-' || g, 'product ' || g, round((5 + (g * 7919) %% 300)::numeric, 2) + 0.90
FROM generate_series(1, %[1]d / 10) g;
INSERT INTO orders (customer_id, status, placed_at)
SELECT 1 + g %% %[1]d, (ARRAY['placed','paid','shipped','delivered'])[1 + g %% 4],
       '2026-06-01'::timestamptz + (g %% 500) * interval '11 minutes'
FROM generate_series(1, %[1]d * 3) g;
INSERT INTO order_lines (order_id, line_no, product_id, quantity)
SELECT o.id, l, 1 + (o.id * 31 + l * 17) %% (%[1]d / 10), 1 + (o.id + l) %% 3
FROM orders o, generate_series(1, 1 + o.id %% 4) l;
UPDATE orders o SET total = s.total
FROM (SELECT ol.order_id, sum(ol.quantity * p.price) AS total
      FROM order_lines ol JOIN products p ON p.id = ol.product_id GROUP BY 1) s
WHERE s.order_id = o.id;
INSERT INTO tags (name) VALUES ('vip'), ('eu'), ('newsletter'), ('wholesale'), ('returning'), ('b2b'), ('churned'), ('beta');
INSERT INTO customer_tags (customer_id, tag_id)
SELECT c.id, t.id FROM customers c JOIN tags t ON (c.id + t.id * 3) %% 7 = 0;
ANALYZE;
`

// shopMapping is examples/shop/mappings/shop.yaml (customer: many-to-one,
// many-to-many, one-to-many three levels deep) plus an order aggregate
// that walks some of the same links the other way. %[1]s is the index
// prefix.
const shopMapping = `version: 1
schema: public
aggregates:
  customer:
    table: customers
    columns: [id, name, email, created_at]
    rename: {created_at: signed_up_at}
    relations:
      address:
        table: addresses
        references: address_id
        columns: [street, city, country]
      tags:
        table: tags
        through: {table: customer_tags, foreign_key: customer_id, references: tag_id}
        value: name
      orders:
        table: orders
        foreign_key: customer_id
        order_by: placed_at desc
        columns: [id, total, status, placed_at]
        relations:
          lines:
            table: order_lines
            foreign_key: order_id
            columns: [line_no, quantity]
            relations:
              product:
                table: products
                references: product_id
                columns: [id, sku, title, price]
    elasticsearch:
      index: %[1]s-customer
      settings: {number_of_shards: 1, number_of_replicas: 0}
      mappings: {properties: {orders: {type: nested}}}
  order:
    table: orders
    columns: [id, status, total, placed_at]
    relations:
      customer:
        table: customers
        references: customer_id
        columns: [id, name, email]
      lines:
        table: order_lines
        foreign_key: order_id
        order_by: quantity desc
        columns: [line_no, quantity]
        relations:
          product:
            table: products
            references: product_id
            columns: [sku, price]
    elasticsearch:
      index: %[1]s-order
      settings: {number_of_shards: 1, number_of_replicas: 0}
`

// workload runs random transactions on the shop. Rows are chosen by
// drawing an id below the table's highest and taking the first existing
// row at or above it, so the workload needs no copy of the database and
// survives transactions whose outcome it never learned (a commit cut by
// a PostgreSQL restart).
type workload struct {
	pool *pgxpool.Pool
	r    *rand.Rand
	rate float64 // operations per second

	max    map[string]int // highest id handed out per serial table
	serial int            // counter for unique names

	ops        atomic.Int64 // operations in committed transactions
	committed  atomic.Int64
	rolledBack atomic.Int64 // on purpose
	failed     atomic.Int64 // errors: server restarts, ambiguous commits
	truncates  atomic.Int64

	mu     sync.Mutex
	errors map[string]int // failed transactions by SQLSTATE, or "connection"
}

// op is one random operation; it returns the SQL's error.
func (w *workload) op(ctx context.Context, tx pgx.Tx) error {
	exec := func(sql string, args ...any) error { _, err := tx.Exec(ctx, sql, args...); return err }
	pick := func(table string) int { return 1 + w.r.IntN(w.max[table]+1) }
	insert := func(table, sql string, args ...any) error {
		var id int
		if err := tx.QueryRow(ctx, sql, args...).Scan(&id); err != nil {
			if errors.Is(err, pgx.ErrNoRows) { // no row at or above the drawn id
				return nil
			}
			return err
		}
		w.max[table] = max(w.max[table], id)
		return nil
	}
	w.serial++
	s := w.serial
	placed := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(w.r.IntN(5000)) * time.Minute)
	// first existing row at or above a random id
	const cust = `(SELECT id FROM customers WHERE id >= %d ORDER BY id LIMIT 1)`
	const ord = `(SELECT id FROM orders WHERE id >= %d ORDER BY id LIMIT 1)`
	const prod = `(SELECT id FROM products WHERE id >= %d ORDER BY id LIMIT 1)`
	const addr = `(SELECT id FROM addresses WHERE id >= %d ORDER BY id LIMIT 1)`
	const tag = `(SELECT id FROM tags WHERE id >= %d ORDER BY id LIMIT 1)`
	switch n := w.r.IntN(1000); {
	case n < 50: // new customer
		return insert("customers", fmt.Sprintf(`INSERT INTO customers (name, email, address_id) VALUES ($1, $2, `+addr+`) RETURNING id`, pick("addresses")),
			fmt.Sprintf("new customer %d", s), fmt.Sprintf("new%d-%d@example.com", s, w.r.IntN(1e9)))
	case n < 90: // rename a customer
		return exec(fmt.Sprintf(`UPDATE customers SET name = $1 WHERE id = `+cust, pick("customers")), fmt.Sprintf("renamed %d", s))
	case n < 100: // change a customer's id: a root key change (cascades to orders and tags)
		return insert("customers", fmt.Sprintf(`UPDATE customers SET id = nextval('customers_id_seq') WHERE id = `+cust+` RETURNING id`, pick("customers")))
	case n < 120: // change an email
		return exec(fmt.Sprintf(`UPDATE customers SET email = $1 WHERE id = `+cust, pick("customers")), fmt.Sprintf("moved%d-%d@example.com", s, w.r.IntN(1e9)))
	case n < 170: // move a customer to another address, or none (many-to-one link)
		if w.r.IntN(5) == 0 {
			return exec(fmt.Sprintf(`UPDATE customers SET address_id = NULL WHERE id = `+cust, pick("customers")))
		}
		return exec(fmt.Sprintf(`UPDATE customers SET address_id = `+addr+` WHERE id = `+cust, pick("addresses"), pick("customers")))
	case n < 190: // delete a customer (cascades to orders, lines, tags)
		return exec(fmt.Sprintf(`DELETE FROM customers WHERE id = `+cust, pick("customers")))
	case n < 205: // new address
		return insert("addresses", `INSERT INTO addresses (street, city, country) VALUES ($1, $2, 'PT') RETURNING id`, fmt.Sprintf("%d Chaos Road", s), "Porto")
	case n < 245: // change an address (fans out to its customers)
		return exec(fmt.Sprintf(`UPDATE addresses SET city = $1, street = $2 WHERE id = `+addr, pick("addresses")), fmt.Sprintf("city %d", s), fmt.Sprintf("%d Side Street", s))
	case n < 255: // delete an address (customers lose it: SET NULL)
		return exec(fmt.Sprintf(`DELETE FROM addresses WHERE id = `+addr, pick("addresses")))
	case n < 335: // new order with 1-4 lines
		var id int
		if err := tx.QueryRow(ctx, fmt.Sprintf(`INSERT INTO orders (customer_id, status, placed_at) SELECT id, 'placed', $1 FROM `+cust+` c(id) RETURNING id`, pick("customers")), placed).Scan(&id); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		w.max["orders"] = max(w.max["orders"], id)
		return exec(fmt.Sprintf(`INSERT INTO order_lines (order_id, line_no, product_id, quantity)
SELECT $1, l, p.id, 1 + (l * 7 + $1) %% 5 FROM generate_series(1, $2::int) l, `+prod+` p(id)`, pick("products")), id, 1+w.r.IntN(4))
	case n < 425: // order status and total
		return exec(fmt.Sprintf(`UPDATE orders SET status = $1, total = $2 WHERE id = `+ord, pick("orders")),
			[]string{"placed", "paid", "shipped", "delivered", "returned"}[w.r.IntN(5)], fmt.Sprintf("%d.%02d", w.r.IntN(900), w.r.IntN(100)))
	case n < 435: // change an order's id: the order aggregate's root key (cascades to lines)
		return insert("orders", fmt.Sprintf(`UPDATE orders SET id = nextval('orders_id_seq') WHERE id = `+ord+` RETURNING id`, pick("orders")))
	case n < 445: // order date (reorders the customer's orders array)
		return exec(fmt.Sprintf(`UPDATE orders SET placed_at = $1 WHERE id = `+ord, pick("orders")), placed)
	case n < 495: // move an order to another customer (one-to-many link)
		return exec(fmt.Sprintf(`UPDATE orders SET customer_id = c.id FROM `+cust+` c(id) WHERE orders.id = `+ord, pick("customers"), pick("orders")))
	case n < 525: // delete an order (cascades to its lines)
		return exec(fmt.Sprintf(`DELETE FROM orders WHERE id = `+ord, pick("orders")))
	case n < 585: // add a line to an order
		return exec(fmt.Sprintf(`INSERT INTO order_lines (order_id, line_no, product_id, quantity)
SELECT o.id, COALESCE((SELECT max(line_no) FROM order_lines WHERE order_id = o.id), 0) + 1, p.id, $1 FROM `+ord+` o(id), `+prod+` p(id)`,
			pick("orders"), pick("products")), 1+w.r.IntN(9))
	case n < 645: // change a line's quantity
		return exec(fmt.Sprintf(`UPDATE order_lines SET quantity = $1 WHERE (order_id, line_no) =
(SELECT order_id, line_no FROM order_lines WHERE order_id >= %d ORDER BY order_id, line_no LIMIT 1)`, pick("orders")), 1+w.r.IntN(9))
	case n < 685: // move a line to another order: a primary key change
		return exec(fmt.Sprintf(`UPDATE order_lines SET order_id = o.id,
  line_no = COALESCE((SELECT max(line_no) FROM order_lines x WHERE x.order_id = o.id), 0) + 1
FROM `+ord+` o(id)
WHERE (order_lines.order_id, order_lines.line_no) = (SELECT order_id, line_no FROM order_lines WHERE order_id >= %d ORDER BY order_id, line_no LIMIT 1)
  AND order_lines.order_id <> o.id`, pick("orders"), pick("orders")))
	case n < 725: // point a line at another product (many-to-one, third level)
		return exec(fmt.Sprintf(`UPDATE order_lines SET product_id = p.id FROM `+prod+` p(id)
WHERE (order_lines.order_id, order_lines.line_no) = (SELECT order_id, line_no FROM order_lines WHERE order_id >= %d ORDER BY order_id, line_no LIMIT 1)`,
			pick("products"), pick("orders")))
	case n < 755: // delete a line
		return exec(fmt.Sprintf(`DELETE FROM order_lines WHERE (order_id, line_no) =
(SELECT order_id, line_no FROM order_lines WHERE order_id >= %d ORDER BY order_id, line_no LIMIT 1)`, pick("orders")))
	case n < 765: // new product
		return insert("products", `INSERT INTO products (sku, title, price) VALUES ($1, $2, $3) RETURNING id`,
			fmt.Sprintf("SKU-N%d", s), fmt.Sprintf("new product %d", s), fmt.Sprintf("%d.%02d", 1+w.r.IntN(300), w.r.IntN(100)))
	case n < 805: // change a product (fans out to every order and customer that holds it)
		return exec(fmt.Sprintf(`UPDATE products SET title = $1, price = $2 WHERE id = `+prod, pick("products")),
			fmt.Sprintf("product v%d", s), fmt.Sprintf("%d.%02d", 1+w.r.IntN(300), w.r.IntN(100)))
	case n < 808: // delete a product (cascades to its lines in many orders)
		return exec(fmt.Sprintf(`DELETE FROM products WHERE id = `+prod, pick("products")))
	case n < 813: // new tag
		return insert("tags", `INSERT INTO tags (name) VALUES ($1) RETURNING id`, fmt.Sprintf("tag-%d", s))
	case n < 823: // rename a tag (fans out to every tagged customer)
		return exec(fmt.Sprintf(`UPDATE tags SET name = $1 WHERE id = `+tag, pick("tags")), fmt.Sprintf("tag-%d", s))
	case n < 825: // delete a tag (cascades to its links)
		return exec(fmt.Sprintf(`DELETE FROM tags WHERE id = `+tag, pick("tags")))
	case n < 905: // tag a customer (join churn)
		return exec(fmt.Sprintf(`INSERT INTO customer_tags (customer_id, tag_id) SELECT c.id, t.id FROM `+cust+` c(id), `+tag+` t(id) ON CONFLICT DO NOTHING`,
			pick("customers"), pick("tags")))
	case n < 965: // untag a customer
		return exec(fmt.Sprintf(`DELETE FROM customer_tags WHERE (customer_id, tag_id) =
(SELECT customer_id, tag_id FROM customer_tags WHERE customer_id >= %d ORDER BY customer_id, tag_id LIMIT 1)`, pick("customers")))
	default: // move a tag link to another customer (both sides of a join row change)
		return exec(fmt.Sprintf(`UPDATE customer_tags SET customer_id = c.id FROM `+cust+` c(id)
WHERE (customer_tags.customer_id, customer_tags.tag_id) = (SELECT customer_id, tag_id FROM customer_tags WHERE customer_id >= %d ORDER BY customer_id, tag_id LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM customer_tags x WHERE x.customer_id = c.id AND x.tag_id = customer_tags.tag_id)`, pick("customers"), pick("customers")))
	}
}

// loadMax reads the highest id of every serial table.
func (w *workload) loadMax(ctx context.Context) error {
	w.max = map[string]int{}
	for _, t := range []string{"customers", "addresses", "orders", "products", "tags"} {
		var n int
		if err := w.pool.QueryRow(ctx, `SELECT COALESCE(max(id), 0) FROM `+t).Scan(&n); err != nil {
			return err
		}
		w.max[t] = n
	}
	return nil
}

// run executes transactions of 1-6 operations at w.rate operations per
// second until stop says so. 5% of transactions roll back on purpose; at
// each operation count in truncateAt a TRUNCATE happens: of the join table
// customer_tags first, then of the order aggregate's root (orders and its
// lines), alternately.
// Errors (a server restart) are counted and the workload goes on.
func (w *workload) run(ctx context.Context, stop func(ops int64) bool, truncateAt []int64) {
	started := time.Now()
	for ctx.Err() == nil && !stop(w.ops.Load()) {
		// pace: operations so far must not run ahead of the rate
		ahead := time.Duration(float64(w.ops.Load())/w.rate*float64(time.Second)) - time.Since(started)
		if ahead > 0 {
			time.Sleep(ahead)
		} else if ahead < -2*time.Second { // after an outage, catch up 2s at most
			started = started.Add(-ahead - 2*time.Second)
		}
		n := 1 + w.r.IntN(6)
		truncate := len(truncateAt) > 0 && w.ops.Load() >= truncateAt[0]
		err := w.tx(ctx, func(tx pgx.Tx) error {
			if truncate {
				_, err := tx.Exec(ctx, []string{`TRUNCATE customer_tags`, `TRUNCATE orders, order_lines`}[w.truncates.Load()%2])
				return err
			}
			for i := 0; i < n; i++ {
				if err := w.op(ctx, tx); err != nil {
					return err
				}
			}
			return nil
		})
		switch {
		case err == errRollback:
			w.rolledBack.Add(1)
		case err != nil:
			w.failed.Add(1)
			reason := "connection"
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				reason = pgErr.Code + " " + pgErr.Message
			}
			time.Sleep(200 * time.Millisecond) // PostgreSQL is likely restarting
			w.mu.Lock()
			if w.errors == nil {
				w.errors = map[string]int{}
			}
			w.errors[reason]++
			w.mu.Unlock()
		case truncate:
			truncateAt = truncateAt[1:]
			w.truncates.Add(1)
			w.ops.Add(1)
			w.committed.Add(1)
		default:
			w.ops.Add(int64(n))
			w.committed.Add(1)
		}
	}
}

var errRollback = errors.New("rolled back on purpose")

// tx runs fn in a transaction; 5% roll back on purpose after fn.
func (w *workload) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if err := fn(tx); err != nil {
		return err
	}
	if w.r.IntN(20) == 0 {
		return errRollback
	}
	return tx.Commit(ctx)
}
