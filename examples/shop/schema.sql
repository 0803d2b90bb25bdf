-- The demo shop: customers with addresses, orders, order lines, products
-- and tags. ~10k customers, ~30k orders, ~75k order lines.
DROP SCHEMA IF EXISTS public CASCADE;
CREATE SCHEMA public;

CREATE TABLE addresses (
  id      serial PRIMARY KEY,
  street  text NOT NULL,
  city    text NOT NULL,
  country char(2) NOT NULL
);
CREATE TABLE customers (
  id         serial PRIMARY KEY,
  name       text NOT NULL,
  email      text NOT NULL UNIQUE,
  address_id int REFERENCES addresses(id),
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE products (
  id    serial PRIMARY KEY,
  sku   text NOT NULL UNIQUE,
  title text NOT NULL,
  price numeric(10,2) NOT NULL
);
CREATE TABLE orders (
  id          serial PRIMARY KEY,
  customer_id int NOT NULL REFERENCES customers(id),
  total       numeric(12,2) NOT NULL DEFAULT 0,
  status      text NOT NULL DEFAULT 'placed',
  placed_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE order_lines (
  order_id   int NOT NULL REFERENCES orders(id) ON DELETE CASCADE,
  line_no    int NOT NULL,
  product_id int NOT NULL REFERENCES products(id),
  quantity   int NOT NULL,
  PRIMARY KEY (order_id, line_no)
);
CREATE TABLE tags (
  id   serial PRIMARY KEY,
  name text NOT NULL UNIQUE
);
CREATE TABLE customer_tags (
  customer_id int NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
  tag_id      int NOT NULL REFERENCES tags(id) ON DELETE CASCADE,
  PRIMARY KEY (customer_id, tag_id)
);
CREATE INDEX ON customers (address_id);
CREATE INDEX ON orders (customer_id);
CREATE INDEX ON order_lines (product_id);
CREATE INDEX ON customer_tags (tag_id);

-- Link columns must be in the before image of updates and deletes so decant
-- can find the documents a row used to belong to (see docs/operations.md).
ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE order_lines REPLICA IDENTITY FULL;
ALTER TABLE customer_tags REPLICA IDENTITY FULL;
ALTER TABLE customers REPLICA IDENTITY FULL;

INSERT INTO addresses (street, city, country)
SELECT g || ' Market Street', (ARRAY['Berlin','Paris','Lisbon','Oslo','Rome','Madrid','Vienna','Dublin'])[1 + g % 8],
       (ARRAY['DE','FR','PT','NO','IT','ES','AT','IE'])[1 + g % 8]
FROM generate_series(1, 8000) g;

INSERT INTO customers (name, email, address_id, created_at)
SELECT (ARRAY['Ada','Grace','Alan','Edsger','Barbara','Donald','Frances','Ken','Margaret','Niklaus'])[1 + g % 10] || ' ' ||
       (ARRAY['Lovelace','Hopper','Turing','Dijkstra','Liskov','Knuth','Allen','Thompson','Hamilton','Wirth'])[1 + (g / 10) % 10],
       'customer' || g || '@example.com',
       CASE WHEN g % 5 = 0 THEN NULL ELSE 1 + g % 8000 END,
       '2026-01-01'::timestamptz + g * interval '37 minutes'
FROM generate_series(1, 10000) g;

INSERT INTO products (sku, title, price)
SELECT 'SKU-' || lpad(g::text, 5, '0'),
       (ARRAY['Espresso machine','Grinder','Kettle','Teapot','Mug','Scale','Filter papers','Beans'])[1 + g % 8] || ' ' || g,
       round((5 + (g * 7919) % 300)::numeric, 2)
FROM generate_series(1, 500) g;

INSERT INTO orders (customer_id, status, placed_at)
SELECT 1 + g % 10000, (ARRAY['placed','paid','shipped','delivered'])[1 + g % 4],
       '2026-06-01'::timestamptz + g * interval '11 minutes'
FROM generate_series(1, 30000) g;

INSERT INTO order_lines (order_id, line_no, product_id, quantity)
SELECT o.id, l, 1 + (o.id * 31 + l * 17) % 500, 1 + (o.id + l) % 3
FROM orders o, generate_series(1, 1 + o.id % 4) l;

UPDATE orders o SET total = s.total
FROM (SELECT ol.order_id, sum(ol.quantity * p.price) AS total
      FROM order_lines ol JOIN products p ON p.id = ol.product_id GROUP BY 1) s
WHERE s.order_id = o.id;

INSERT INTO tags (name) VALUES ('vip'), ('eu'), ('newsletter'), ('wholesale'), ('returning');
INSERT INTO customer_tags (customer_id, tag_id)
SELECT c.id, t.id FROM customers c JOIN tags t ON (c.id + t.id * 3) % 7 = 0;

ANALYZE;
