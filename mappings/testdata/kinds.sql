-- One table shape per relation kind (see kindsCatalog in sql_test.go).
CREATE TABLE categories (id int PRIMARY KEY, parent_id int REFERENCES categories (id), name text NOT NULL);
CREATE INDEX ON categories (parent_id);
CREATE TABLE users (id int PRIMARY KEY, name text, manager_id int REFERENCES users (id));
CREATE TABLE profiles (user_id int PRIMARY KEY REFERENCES users (id), bio text);
CREATE TABLE messages (
  id int8 PRIMARY KEY, sender_id int NOT NULL REFERENCES users (id),
  recipient_id int NOT NULL REFERENCES users (id), body text, sent_at timestamptz);
CREATE TABLE shipments (order_no int, region text, carrier text, PRIMARY KEY (order_no, region));
CREATE TABLE shipment_items (
  order_no int, region text, line int, sku text, PRIMARY KEY (order_no, region, line),
  FOREIGN KEY (order_no, region) REFERENCES shipments (order_no, region));
CREATE SCHEMA billing;
CREATE TABLE billing.invoices (id uuid PRIMARY KEY, user_id int NOT NULL REFERENCES users (id), amount numeric);
CREATE TABLE billing.invoice_lines (invoice_id uuid REFERENCES billing.invoices (id), n int, text text, PRIMARY KEY (invoice_id, n));
CREATE TABLE groups (id int PRIMARY KEY, name text);
CREATE TABLE memberships (
  user_id int REFERENCES users (id), group_id int REFERENCES groups (id), role text,
  PRIMARY KEY (user_id, group_id));
CREATE TABLE nokey_notes (user_id int, note text);

INSERT INTO categories VALUES (1, NULL, 'root'), (2, 1, 'b-child'), (3, 1, 'a-child'), (4, 3, 'grandchild'), (5, 4, 'great-grandchild');
INSERT INTO users VALUES (1, 'Boss', NULL), (2, 'Eve', 1), (3, NULL, 1);
INSERT INTO profiles VALUES (2, 'likes tea');
INSERT INTO messages VALUES
  (1, 2, 1, 'hi boss', '2026-01-01 09:00:00+00'),
  (2, 2, 3, 'hi three', NULL),
  (3, 2, 1, 'again', '2026-01-02 09:00:00+00'),
  (9007199254740993, 1, 2, 'big id', '2026-01-03 09:00:00+00');
INSERT INTO shipments VALUES (7, 'eu', 'DHL'), (7, 'us', 'UPS'), (8, 'eu', NULL);
INSERT INTO shipment_items VALUES (7, 'eu', 2, 'B'), (7, 'eu', 1, 'A'), (7, 'us', 1, 'C');
INSERT INTO billing.invoices VALUES
  ('00000000-0000-0000-0000-000000000001', 2, 12.50),
  ('00000000-0000-0000-0000-000000000002', 2, 0.10);
INSERT INTO billing.invoice_lines VALUES
  ('00000000-0000-0000-0000-000000000001', 2, 'second'),
  ('00000000-0000-0000-0000-000000000001', 1, 'first');
INSERT INTO groups VALUES (1, 'admins'), (2, 'staff');
INSERT INTO memberships VALUES (1, 1, 'owner'), (1, 2, 'member'), (2, 2, 'member');
INSERT INTO nokey_notes VALUES (2, 'zeta'), (2, 'alpha'), (2, 'alpha');
