-- aggregate user: root table public.users, id (id), index user, defined in test.yaml

-- build: one row per existing id: the id columns as jsonb, then the document.
--   $1: text[] of id values, cast to integer
SELECT to_jsonb(t0."id") AS "id",
  '{"id":' || t0."id"::text
    || ',"name":' || COALESCE(to_json(t0."name")::text, 'null')
    || ',"profile":' || COALESCE((SELECT '{"user_id":' || t1."user_id"::text
        || ',"bio":' || COALESCE(to_json(t1."bio")::text, 'null') || '}'
      FROM "public"."profiles" AS t1
      WHERE t1."user_id" = t0."id"), 'null')
    || ',"manager":' || COALESCE((SELECT '{"id":' || t2."id"::text
        || ',"name":' || COALESCE(to_json(t2."name")::text, 'null') || '}'
      FROM "public"."users" AS t2
      WHERE t2."id" = t0."manager_id"), 'null')
    || ',"manager_name":' || COALESCE((SELECT COALESCE(to_json(t3."name")::text, 'null')
      FROM "public"."users" AS t3
      WHERE t3."id" = t0."manager_id"), 'null')
    || ',"sent":' || COALESCE((SELECT '[' || string_agg('{"id":' || t4."id"::text
        || ',"sender_id":' || t4."sender_id"::text
        || ',"recipient_id":' || t4."recipient_id"::text
        || ',"body":' || COALESCE(to_json(t4."body")::text, 'null')
        || ',"sent_at":' || COALESCE(to_json(t4."sent_at")::text, 'null') || '}', ',' ORDER BY t4."sent_at" DESC NULLS LAST, t4."id") || ']'
      FROM "public"."messages" AS t4
      WHERE t4."sender_id" = t0."id"), '[]')
    || ',"received":' || COALESCE((SELECT '[' || string_agg(COALESCE(to_json(t5."body")::text, 'null'), ',' ORDER BY t5."id") || ']'
      FROM "public"."messages" AS t5
      WHERE t5."recipient_id" = t0."id"), '[]')
    || ',"groups":' || COALESCE((SELECT '[' || string_agg('{"id":' || t6."id"::text
        || ',"name":' || COALESCE(to_json(t6."name")::text, 'null') || '}', ',' ORDER BY t6."id") || ']'
      FROM "public"."memberships" AS j6 JOIN "public"."groups" AS t6 ON t6."id" = j6."group_id"
      WHERE j6."user_id" = t0."id"), '[]')
    || ',"group_names":' || COALESCE((SELECT '[' || string_agg(COALESCE(to_json(t7."name")::text, 'null'), ',' ORDER BY t7."id") || ']'
      FROM "public"."memberships" AS j7 JOIN "public"."groups" AS t7 ON t7."id" = j7."group_id"
      WHERE j7."user_id" = t0."id"), '[]')
    || ',"invoices":' || COALESCE((SELECT '[' || string_agg('{"id":' || to_json(t8."id")::text
        || ',"user_id":' || t8."user_id"::text
        || ',"amount":' || COALESCE(to_json(t8."amount")::text, 'null')
        || ',"lines":' || COALESCE((SELECT '[' || string_agg('{"invoice_id":' || to_json(t9."invoice_id")::text
            || ',"n":' || t9."n"::text
            || ',"text":' || COALESCE(to_json(t9."text")::text, 'null') || '}', ',' ORDER BY t9."invoice_id", t9."n") || ']'
          FROM "billing"."invoice_lines" AS t9
          WHERE t9."invoice_id" = t8."id"), '[]') || '}', ',' ORDER BY t8."id") || ']'
      FROM "billing"."invoices" AS t8
      WHERE t8."user_id" = t0."id"), '[]')
    || ',"notes":' || COALESCE((SELECT '[' || string_agg(COALESCE(to_json(t10."note")::text, 'null'), ',' ORDER BY (COALESCE(to_json(t10."note")::text, 'null'))::jsonb) || ']'
      FROM "public"."nokey_notes" AS t10
      WHERE t10."user_id" = t0."id"), '[]') || '}' AS doc
FROM "public"."users" AS t0
WHERE t0."id" = ANY($1::text[]::integer[]);

-- route aggregates.user: changes to public.users (root)
--   watch: id, name, manager_id
--   direct: the aggregate id is (id) of the before and after images

-- route aggregates.user.relations.profile: changes to public.profiles (one-to-one)
--   watch: user_id, bio
--   direct: the aggregate id is (user_id) of the before and after images

-- route aggregates.user.relations.manager: changes to public.users (many-to-one)
--   watch: id, name
--   lookup from (id) of the before and after images:
--   $1: text[] of id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."users" AS t0
WHERE t0."manager_id" = ANY($1::text[]::integer[]);

-- route aggregates.user.relations.manager_name: changes to public.users (many-to-one)
--   watch: id, name
--   lookup from (id) of the before and after images:
--   $1: text[] of id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."users" AS t0
WHERE t0."manager_id" = ANY($1::text[]::integer[]);

-- route aggregates.user.relations.sent: changes to public.messages (one-to-many)
--   watch: id, sender_id, recipient_id, body, sent_at
--   direct: the aggregate id is (sender_id) of the before and after images

-- route aggregates.user.relations.received: changes to public.messages (one-to-many)
--   watch: id, recipient_id, body
--   direct: the aggregate id is (recipient_id) of the before and after images

-- route aggregates.user.relations.groups: changes to public.groups (many-to-many)
--   watch: id, name
--   lookup from (id) of the before and after images:
--   $1: text[] of id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."users" AS t0
JOIN "public"."memberships" AS j1 ON j1."user_id" = t0."id"
WHERE j1."group_id" = ANY($1::text[]::integer[]);

-- route aggregates.user.relations.groups.through: changes to public.memberships (many-to-many)
--   watch: user_id, group_id
--   direct: the aggregate id is (user_id) of the before and after images

-- route aggregates.user.relations.group_names: changes to public.groups (many-to-many)
--   watch: id, name
--   lookup from (id) of the before and after images:
--   $1: text[] of id values, cast to integer
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."users" AS t0
JOIN "public"."memberships" AS j1 ON j1."user_id" = t0."id"
WHERE j1."group_id" = ANY($1::text[]::integer[]);

-- route aggregates.user.relations.group_names.through: changes to public.memberships (many-to-many)
--   watch: user_id, group_id
--   direct: the aggregate id is (user_id) of the before and after images

-- route aggregates.user.relations.invoices: changes to billing.invoices (one-to-many)
--   watch: id, user_id, amount
--   direct: the aggregate id is (user_id) of the before and after images

-- route aggregates.user.relations.invoices.relations.lines: changes to billing.invoice_lines (one-to-many)
--   watch: invoice_id, n, text
--   lookup from (invoice_id) of the before and after images:
--   $1: text[] of invoice_id values, cast to uuid
SELECT DISTINCT to_jsonb(t0."id") AS "id"
FROM "public"."users" AS t0
JOIN "billing"."invoices" AS t1 ON t1."user_id" = t0."id"
WHERE t1."id" = ANY($1::text[]::uuid[]);

-- route aggregates.user.relations.notes: changes to public.nokey_notes (one-to-many)
--   watch: user_id, note
--   direct: the aggregate id is (user_id) of the before and after images
