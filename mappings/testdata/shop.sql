-- The database of the PRODUCT.md §3 example, with a few rows.
CREATE TABLE addresses (id int PRIMARY KEY, street text, city text, country text);
CREATE TABLE customers (
  id int PRIMARY KEY, name text NOT NULL, email text UNIQUE,
  created_at timestamptz NOT NULL, address_id int REFERENCES addresses (id));
CREATE TABLE products (id int PRIMARY KEY, sku text NOT NULL UNIQUE, title text NOT NULL, price numeric);
CREATE TABLE orders (
  id int PRIMARY KEY, customer_id int NOT NULL REFERENCES customers (id),
  placed_at timestamptz NOT NULL, total numeric);
CREATE INDEX ON orders (customer_id);
CREATE TABLE order_lines (
  id int PRIMARY KEY, order_id int NOT NULL REFERENCES orders (id),
  product_id int NOT NULL REFERENCES products (id), qty int NOT NULL, price numeric);
CREATE INDEX ON order_lines (order_id);
CREATE INDEX ON order_lines (product_id);
CREATE TABLE tags (id int PRIMARY KEY, name text NOT NULL UNIQUE);
CREATE TABLE customer_tags (
  customer_id int REFERENCES customers (id), tag_id int REFERENCES tags (id),
  PRIMARY KEY (customer_id, tag_id));
CREATE INDEX ON customer_tags (tag_id);

INSERT INTO addresses VALUES (10, '1 Main St', 'Lyon', 'FR'), (11, '2 High St', 'York', 'GB');
INSERT INTO customers VALUES
  (1, 'Ann', 'ann@example.com', '2026-01-02 03:04:05.123456+00', 10),
  (2, 'Bob', NULL, '2026-02-03 00:00:00+00', NULL),
  (3, 'Cy "the" O''Neil', 'cy@example.com', '2026-03-04 12:00:00+00', 11);
INSERT INTO products VALUES (100, 'SKU-1', 'Kettle', 19.90), (101, 'SKU-2', 'Teapot', 35.00), (102, 'SKU-3', 'Unused', 1);
INSERT INTO orders VALUES
  (1000, 1, '2026-05-01 10:00:00+00', 54.90),
  (1001, 1, '2026-06-01 10:00:00+00', 19.90),
  (1002, 3, '2026-05-15 10:00:00+00', 0);
INSERT INTO order_lines VALUES
  (5000, 1000, 100, 1, 19.90), (5001, 1000, 101, 1, 35.00),
  (5002, 1001, 100, 1, 19.90);
INSERT INTO tags VALUES (1, 'vip'), (2, 'eu'), (3, 'unused');
INSERT INTO customer_tags VALUES (1, 2), (1, 1), (3, 1);
