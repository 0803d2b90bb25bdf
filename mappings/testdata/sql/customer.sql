-- aggregate customer: root table public.customers, id (id), index customers, defined in test.yaml

-- build: one row per existing id: the id columns as jsonb, then the document.
--   $1: text[] of id values, cast to integer
SELECT to_jsonb(t0."id") AS "id",
  '{"id":' || t0."id"::text
    || ',"name":' || to_json(t0."name")::text
    || ',"email":' || COALESCE(to_json(t0."email")::text, 'null')
    || ',"signed_up_at":' || to_json(t0."created_at")::text
    || ',"orders":' || COALESCE((SELECT '[' || string_agg('{"id":' || t1."id"::text
        || ',"customer_id":' || t1."customer_id"::text
        || ',"placed_at":' || to_json(t1."placed_at")::text
        || ',"total":' || COALESCE(to_json(t1."total")::text, 'null')
        || ',"lines":' || COALESCE((SELECT '[' || string_agg('{"id":' || t2."id"::text
            || ',"order_id":' || t2."order_id"::text
            || ',"product_id":' || t2."product_id"::text
            || ',"qty":' || t2."qty"::text
            || ',"price":' || COALESCE(to_json(t2."price")::text, 'null')
            || ',"product":' || COALESCE((SELECT '{"id":' || t3."id"::text
                || ',"sku":' || to_json(t3."sku")::text
                || ',"title":' || to_json(t3."title")::text || '}'
              FROM "public"."products" AS t3
              WHERE t3."id" = t2."product_id"), 'null') || '}', ',' ORDER BY t2."id") || ']'
          FROM "public"."order_lines" AS t2
          WHERE t2."order_id" = t1."id"), '[]') || '}', ',' ORDER BY t1."placed_at" DESC, t1."id") || ']'
      FROM "public"."orders" AS t1
      WHERE t1."customer_id" = t0."id"), '[]')
    || ',"address":' || COALESCE((SELECT '{"id":' || t4."id"::text
        || ',"street":' || COALESCE(to_json(t4."street")::text, 'null')
        || ',"city":' || COALESCE(to_json(t4."city")::text, 'null')
        || ',"country":' || COALESCE(to_json(t4."country")::text, 'null') || '}'
      FROM "public"."addresses" AS t4
      WHERE t4."id" = t0."address_id"), 'null')
    || ',"tags":' || COALESCE((SELECT '[' || string_agg(to_json(t5."name")::text, ',' ORDER BY t5."id") || ']'
      FROM "public"."customer_tags" AS j5 JOIN "public"."tags" AS t5 ON t5."id" = j5."tag_id"
      WHERE j5."customer_id" = t0."id"), '[]') || '}' AS doc
FROM "public"."customers" AS t0
WHERE t0."id" = ANY($1::text[]::integer[]);

-- batch build, what the build stage runs: the build statement with a marker in place of
-- each shared object (a many-to-one inside an array), then in the same snapshot one statement
-- per shared relation that builds each object the batch refers to once; decant splices them in.
--   $1: text[] of id values, cast to integer
SELECT to_jsonb(t0."id") AS "id",
  '{"id":' || t0."id"::text
    || ',"name":' || to_json(t0."name")::text
    || ',"email":' || COALESCE(to_json(t0."email")::text, 'null')
    || ',"signed_up_at":' || to_json(t0."created_at")::text
    || ',"orders":' || COALESCE((SELECT '[' || string_agg('{"id":' || t1."id"::text
        || ',"customer_id":' || t1."customer_id"::text
        || ',"placed_at":' || to_json(t1."placed_at")::text
        || ',"total":' || COALESCE(to_json(t1."total")::text, 'null')
        || ',"lines":' || COALESCE((SELECT '[' || string_agg('{"id":' || t2."id"::text
            || ',"order_id":' || t2."order_id"::text
            || ',"product_id":' || t2."product_id"::text
            || ',"qty":' || t2."qty"::text
            || ',"price":' || COALESCE(to_json(t2."price")::text, 'null')
            || ',"product":' || COALESCE(E'\x010\x02' || t2."product_id"::text || E'\x03', 'null') || '}', ',' ORDER BY t2."id") || ']'
          FROM "public"."order_lines" AS t2
          WHERE t2."order_id" = t1."id"), '[]') || '}', ',' ORDER BY t1."placed_at" DESC, t1."id") || ']'
      FROM "public"."orders" AS t1
      WHERE t1."customer_id" = t0."id"), '[]')
    || ',"address":' || COALESCE((SELECT '{"id":' || t3."id"::text
        || ',"street":' || COALESCE(to_json(t3."street")::text, 'null')
        || ',"city":' || COALESCE(to_json(t3."city")::text, 'null')
        || ',"country":' || COALESCE(to_json(t3."country")::text, 'null') || '}'
      FROM "public"."addresses" AS t3
      WHERE t3."id" = t0."address_id"), 'null')
    || ',"tags":' || COALESCE((SELECT '[' || string_agg(to_json(t4."name")::text, ',' ORDER BY t4."id") || ']'
      FROM "public"."customer_tags" AS j4 JOIN "public"."tags" AS t4 ON t4."id" = j4."tag_id"
      WHERE j4."customer_id" = t0."id"), '[]') || '}' AS doc
FROM "public"."customers" AS t0
WHERE t0."id" = ANY($1::text[]::integer[]);

-- shared object 0, aggregates.customer.relations.orders.relations.lines.relations.product: one row per referencing value that names a row: its position, the object.
--   $1: text[] of product_id values, cast to integer
SELECT k.ord,
  '{"id":' || t0."id"::text
    || ',"sku":' || to_json(t0."sku")::text
    || ',"title":' || to_json(t0."title")::text || '}' AS doc
FROM unnest($1::text[]::integer[]) WITH ORDINALITY AS k(k0, ord)
JOIN "public"."products" AS t0 ON t0."id" = k.k0;

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
