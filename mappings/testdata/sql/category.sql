-- aggregate category: root table public.categories, id (id), index category, defined in test.yaml

-- build: one row per existing id: the id columns as jsonb, then the document.
--   $1: text[] of id values, cast to integer
SELECT to_jsonb(t0."id") AS "id",
  '{"id":' || t0."id"::text
    || ',"parent_id":' || COALESCE(t0."parent_id"::text, 'null')
    || ',"name":' || to_json(t0."name")::text
    || ',"children":' || COALESCE((SELECT '[' || string_agg('{"id":' || t1."id"::text
        || ',"parent_id":' || COALESCE(t1."parent_id"::text, 'null')
        || ',"name":' || to_json(t1."name")::text
        || ',"children":' || COALESCE((SELECT '[' || string_agg('{"id":' || t2."id"::text
            || ',"parent_id":' || COALESCE(t2."parent_id"::text, 'null')
            || ',"name":' || to_json(t2."name")::text || '}', ',' ORDER BY t2."name", t2."id") || ']'
          FROM "public"."categories" AS t2
          WHERE t2."parent_id" = t1."id"), '[]') || '}', ',' ORDER BY t1."name", t1."id") || ']'
      FROM "public"."categories" AS t1
      WHERE t1."parent_id" = t0."id"), '[]')
    || ',"parent":' || COALESCE((SELECT '{"id":' || t3."id"::text
        || ',"name":' || to_json(t3."name")::text || '}'
      FROM "public"."categories" AS t3
      WHERE t3."id" = t0."parent_id"), 'null') || '}' AS doc
FROM "public"."categories" AS t0
WHERE t0."id" = ANY($1::text[]::integer[]);

-- route aggregates.category: changes to public.categories (root)
--   watch: id, parent_id, name
--   direct: the aggregate id is (id) of the before and after images

-- route aggregates.category.relations.children: changes to public.categories (one-to-many)
--   watch: id, parent_id, name
--   direct: the aggregate id is (parent_id) of the before and after images

-- route aggregates.category.relations.children.relations.children: changes to public.categories (one-to-many)
--   watch: id, parent_id, name
--   lookup from (parent_id) of the before and after images:
--   $1: text[] of parent_id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."categories" AS t0
JOIN "public"."categories" AS t1 ON t1."parent_id" = t0."id"
WHERE t1."id" = ANY($1::text[]::integer[]);

-- route aggregates.category.relations.parent: changes to public.categories (many-to-one)
--   watch: id, name
--   lookup from (id) of the before and after images:
--   $1: text[] of id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."categories" AS t0
WHERE t0."parent_id" = ANY($1::text[]::integer[]);
