-- aggregate shipment: root table public.shipments, id (order_no, region), index shipment, defined in test.yaml

-- build: one row per existing id: the id columns as jsonb, then the document.
--   $1: text[] of order_no values, cast to integer
--   $2: text[] of region values, cast to text
SELECT to_jsonb(t0."order_no") AS "order_no", to_jsonb(t0."region") AS "region",
  '{"order_no":' || t0."order_no"::text
    || ',"region":' || to_json(t0."region")::text
    || ',"carrier":' || COALESCE(to_json(t0."carrier")::text, 'null')
    || ',"items":' || COALESCE((SELECT '[' || string_agg('{"line":' || t1."line"::text
        || ',"sku":' || COALESCE(to_json(t1."sku")::text, 'null') || '}', ',' ORDER BY t1."order_no", t1."region", t1."line") || ']'
      FROM "public"."shipment_items" AS t1
      WHERE t1."order_no" = t0."order_no" AND t1."region" = t0."region"), '[]') || '}' AS doc
FROM "public"."shipments" AS t0
WHERE (t0."order_no", t0."region") IN (SELECT * FROM unnest($1::text[]::integer[], $2::text[]::text[]));

-- route aggregates.shipment: changes to public.shipments (root)
--   watch: order_no, region, carrier
--   direct: the aggregate id is (order_no, region) of the before and after images

-- route aggregates.shipment.relations.items: changes to public.shipment_items (one-to-many)
--   watch: order_no, region, line, sku
--   direct: the aggregate id is (order_no, region) of the before and after images
