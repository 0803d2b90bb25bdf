-- aggregate user: root table public.users, id (id), index user, defined in test.yaml

-- build: one row per existing id: the id columns as jsonb, then the document.
--   $1: text[] of id values, cast to integer
SELECT to_jsonb(t0."id") AS "id",
  json_build_object(
    'id', t0."id",
    'name', t0."name",
    'profile', (SELECT json_build_object(
        'user_id', t1."user_id",
        'bio', t1."bio")
      FROM "public"."profiles" AS t1
      WHERE t1."user_id" = t0."id"),
    'manager', (SELECT json_build_object(
        'id', t2."id",
        'name', t2."name")
      FROM "public"."users" AS t2
      WHERE t2."id" = t0."manager_id"),
    'manager_name', (SELECT to_json(t3."name")
      FROM "public"."users" AS t3
      WHERE t3."id" = t0."manager_id"),
    'sent', COALESCE((SELECT json_agg(json_build_object(
        'id', t4."id",
        'sender_id', t4."sender_id",
        'recipient_id', t4."recipient_id",
        'body', t4."body",
        'sent_at', t4."sent_at") ORDER BY t4."sent_at" DESC NULLS LAST, t4."id")
      FROM "public"."messages" AS t4
      WHERE t4."sender_id" = t0."id"), '[]'::json),
    'received', COALESCE((SELECT json_agg(to_json(t5."body") ORDER BY t5."id")
      FROM "public"."messages" AS t5
      WHERE t5."recipient_id" = t0."id"), '[]'::json),
    'groups', COALESCE((SELECT json_agg(json_build_object(
        'id', t6."id",
        'name', t6."name") ORDER BY t6."id")
      FROM "public"."memberships" AS j6 JOIN "public"."groups" AS t6 ON t6."id" = j6."group_id"
      WHERE j6."user_id" = t0."id"), '[]'::json),
    'group_names', COALESCE((SELECT json_agg(to_json(t7."name") ORDER BY t7."id")
      FROM "public"."memberships" AS j7 JOIN "public"."groups" AS t7 ON t7."id" = j7."group_id"
      WHERE j7."user_id" = t0."id"), '[]'::json),
    'invoices', COALESCE((SELECT json_agg(json_build_object(
        'id', t8."id",
        'user_id', t8."user_id",
        'amount', t8."amount",
        'lines', COALESCE((SELECT json_agg(json_build_object(
            'invoice_id', t9."invoice_id",
            'n', t9."n",
            'text', t9."text") ORDER BY t9."invoice_id", t9."n")
          FROM "billing"."invoice_lines" AS t9
          WHERE t9."invoice_id" = t8."id"), '[]'::json)) ORDER BY t8."id")
      FROM "billing"."invoices" AS t8
      WHERE t8."user_id" = t0."id"), '[]'::json),
    'notes', COALESCE((SELECT json_agg(to_json(t10."note") ORDER BY (to_json(t10."note"))::jsonb)
      FROM "public"."nokey_notes" AS t10
      WHERE t10."user_id" = t0."id"), '[]'::json)) AS doc
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
