-- aggregate customer: root table public.customers, id (id), index customers, defined in test.yaml

-- build: one row per existing id: the id columns as jsonb, then the document.
--   $1: text[] of id values, cast to integer
SELECT to_jsonb(t0."id") AS "id",
  json_build_object(
    'id', t0."id",
    'name', t0."name",
    'email', t0."email",
    'signed_up_at', t0."created_at",
    'orders', COALESCE((SELECT json_agg(json_build_object(
        'id', t1."id",
        'customer_id', t1."customer_id",
        'placed_at', t1."placed_at",
        'total', t1."total",
        'lines', COALESCE((SELECT json_agg(json_build_object(
            'id', t2."id",
            'order_id', t2."order_id",
            'product_id', t2."product_id",
            'qty', t2."qty",
            'price', t2."price",
            'product', (SELECT json_build_object(
                'id', t3."id",
                'sku', t3."sku",
                'title', t3."title")
              FROM "public"."products" AS t3
              WHERE t3."id" = t2."product_id")) ORDER BY t2."id")
          FROM "public"."order_lines" AS t2
          WHERE t2."order_id" = t1."id"), '[]'::json)) ORDER BY t1."placed_at" DESC, t1."id")
      FROM "public"."orders" AS t1
      WHERE t1."customer_id" = t0."id"), '[]'::json),
    'address', (SELECT json_build_object(
        'id', t4."id",
        'street', t4."street",
        'city', t4."city",
        'country', t4."country")
      FROM "public"."addresses" AS t4
      WHERE t4."id" = t0."address_id"),
    'tags', COALESCE((SELECT json_agg(to_json(t5."name") ORDER BY t5."id")
      FROM "public"."customer_tags" AS j5 JOIN "public"."tags" AS t5 ON t5."id" = j5."tag_id"
      WHERE j5."customer_id" = t0."id"), '[]'::json)) AS doc
FROM "public"."customers" AS t0
WHERE t0."id" = ANY($1::text[]::integer[]);

-- route aggregates.customer: changes to public.customers (root)
--   watch: id, name, email, created_at, address_id
--   direct: the aggregate id is (id) of the before and after images

-- route aggregates.customer.relations.orders: changes to public.orders (one-to-many)
--   watch: id, customer_id, placed_at, total
--   direct: the aggregate id is (customer_id) of the before and after images

-- route aggregates.customer.relations.orders.relations.lines: changes to public.order_lines (one-to-many)
--   watch: id, order_id, product_id, qty, price
--   lookup from (order_id) of the before and after images:
--   $1: text[] of order_id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."customers" AS t0
JOIN "public"."orders" AS t1 ON t1."customer_id" = t0."id"
WHERE t1."id" = ANY($1::text[]::integer[]);

-- route aggregates.customer.relations.orders.relations.lines.relations.product: changes to public.products (many-to-one)
--   watch: id, sku, title
--   lookup from (id) of the before and after images:
--   $1: text[] of id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."customers" AS t0
JOIN "public"."orders" AS t1 ON t1."customer_id" = t0."id"
JOIN "public"."order_lines" AS t2 ON t2."order_id" = t1."id"
WHERE t2."product_id" = ANY($1::text[]::integer[]);

-- route aggregates.customer.relations.address: changes to public.addresses (many-to-one)
--   watch: id, street, city, country
--   lookup from (id) of the before and after images:
--   $1: text[] of id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."customers" AS t0
WHERE t0."address_id" = ANY($1::text[]::integer[]);

-- route aggregates.customer.relations.tags: changes to public.tags (many-to-many)
--   watch: id, name
--   lookup from (id) of the before and after images:
--   $1: text[] of id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."customers" AS t0
JOIN "public"."customer_tags" AS j1 ON j1."customer_id" = t0."id"
WHERE j1."tag_id" = ANY($1::text[]::integer[]);

-- route aggregates.customer.relations.tags.through: changes to public.customer_tags (many-to-many)
--   watch: customer_id, tag_id
--   direct: the aggregate id is (customer_id) of the before and after images
