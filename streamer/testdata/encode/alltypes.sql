-- One column per type, rows of edge values: the encoder test compares
-- EncodeValue/EncodeTuple of each value's text form with to_jsonb().
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'it''s "complicated", {really}');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN amount AS numeric(12,2);
CREATE DOMAIN amount2 AS amount;          -- a domain over a domain
CREATE DOMAIN int_list AS integer[];      -- a domain over an array
CREATE DOMAIN doc AS jsonb;
CREATE TYPE address AS (street text, "zip code" varchar(10), n int, tags text[], since timestamptz, gone int);
ALTER TYPE address DROP ATTRIBUTE gone;   -- dropped attributes are not in the text form
CREATE TYPE person AS (name text, home address, moods mood[], extra jsonb, born date, "Ünïcode ключ" text, a int);

CREATE TABLE alltypes (
  id int PRIMARY KEY,
  c_int2 smallint, c_int4 integer, c_int8 bigint,
  c_numeric numeric, c_numeric_scaled numeric(10,2), c_float4 real, c_float8 double precision,
  c_bool boolean, c_text text, c_varchar varchar(20), c_char char(5), c_name name, c_qchar "char",
  c_bytea bytea, c_uuid uuid, c_json json, c_jsonb jsonb,
  c_date date, c_time time, c_timetz timetz, c_timestamp timestamp, c_timestamptz timestamptz, c_interval interval,
  c_int_arr int[], c_int_arr2 int[][], c_text_arr text[], c_float_arr float8[], c_numeric_arr numeric[],
  c_bool_arr bool[], c_bytea_arr bytea[], c_json_arr json[], c_jsonb_arr jsonb[], c_date_arr date[],
  c_ts_arr timestamp[], c_tstz_arr timestamptz[], c_box_arr box[], c_uuid_arr uuid[], c_char_arr char(3)[],
  c_enum mood, c_enum_arr mood[],
  c_domain posint, c_domain_num amount, c_domain2 amount2, c_domain_arr posint[], c_domain_list int_list, c_domain_doc doc,
  c_composite address, c_composite_nested person, c_composite_arr address[],
  c_int4range int4range, c_tstzrange tstzrange, c_daterange daterange, c_numrange numrange, c_multirange int4multirange,
  c_inet inet, c_cidr cidr, c_macaddr macaddr, c_macaddr8 macaddr8, c_money money,
  c_bit bit(4), c_varbit varbit, c_tsvector tsvector, c_tsquery tsquery, c_xml xml, c_oid oid,
  c_point point, c_box box, c_pg_lsn pg_lsn, c_int2vector int2vector, c_oidvector oidvector, c_xid8 xid8
);

-- Row 1: ordinary values.
INSERT INTO alltypes VALUES (1,
  1, 42, 9007199254740993,
  12345.6789, 19.90, 1.1, 0.1,
  true, 'hello, world', 'varchar', 'ab', 'a_name', 'x',
  '\x0102ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"b": 1, "a": [1, 2.50, "x"]}', '{"b": 1, "a": [1, 2.50, "x"]}',
  '2026-11-30', '10:00:00.123456', '10:00:00+02', '2026-11-30 10:00:00.123456', '2026-11-30 10:00:00.123456+00', '1 year 2 mons 3 days 04:05:06.789',
  '{1,2,3}', '{{1,2},{3,4}}', '{a,b,c}', '{1.5,2.25}', '{1.50,2}',
  '{t,f}', '{"\\x00","\\xdead"}', '{"{\"a\": 1}"}', '{"{\"a\": 1}"}', '{2026-01-01,2026-12-31}',
  '{"2026-01-01 00:00:00"}', '{"2026-01-01 00:00:00+00"}', '{(1,1),(0,0);(3,3),(2,2)}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}', '{a,bb}',
  'happy', '{sad,ok}',
  7, 19.90, 1.5, '{1,2}', '{3,4}', '{"z": [true, null]}',
  ROW('Main St 1', '12345', 10, '{x,y}', '2026-01-01 00:00:00+00'),
  ROW('Ann', ROW('Elm St', '999', 2, '{}', NULL), '{happy}', '{"k": "v"}', '1990-05-17', 'ü', 1),
  ARRAY[ROW('A', '1', 1, '{a}', NULL)::address, ROW('B', NULL, NULL, NULL, '2026-11-30 10:00:00+00')::address],
  '[1,10)', '[2026-01-01 00:00:00+00,2026-02-01 00:00:00+00)', '[2026-01-01,2026-02-01)', '(1.5,2.5]', '{[1,3), [5,7)}',
  '192.168.0.1', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', 1234.56,
  B'1010', B'101', 'a fat cat sat', 'fat & cat', '<a href="x">t</a>', 4294967295,
  '(1,2)', '(1,1),(0,0)', '16/B374D848', '1 2 3', '1 2', '12345'
);

-- Row 2: special numbers, extreme and BC dates, escapes.
INSERT INTO alltypes VALUES (2,
  -32768, -2147483648, -9223372036854775808,
  'NaN', -0.00, 'NaN', 'Infinity',
  false, E'quote " backslash \\ slash / tab \t nl \n cr \r bs \b ff \f bell \x07 esc \x1b del \x7f é 😀', '', 'ab   ', '', E'\\',
  '\x', '00000000-0000-0000-0000-000000000000', '{"a": 1, "a": {"y": 2, "x": [1e2, -0, 0.0, 1E-2, 12345678901234567890123456789]}, "": "\u00e9\/\n", "bb": null}', '{"a": 1, "a": {"y": 2, "x": [1e2, -0, 0.0, 1E-2]}, "": "\u00e9\/\n"}',
  '0044-03-15 BC', '00:00:00', '23:59:59.999999-12:34:56', '0044-03-15 00:00:00 BC', '0044-03-15 00:00:00+00 BC', '-178000000 years',
  '[0:2]={1,NULL,3}', '[2:3][0:1]={{1,NULL},{NULL,4}}', E'{"a b","NULL",NULL,"","q\\"\\\\"," lead","{x}","a,b",  spaced  }', '{NaN,Infinity,-Infinity,1e+300,-0}', '{NaN,1.50,-1e-5}',
  '{NULL}', '{}', E'{"[1, 2e2]",NULL,"\\"s\\""}', E'{"{\\"b\\": [], \\"a\\": null}",NULL}', '{infinity,-infinity,0044-03-15 BC}',
  '{infinity,"0001-01-01 00:00:00 BC"}', '{-infinity,"1900-01-01 00:00:00+00","2026-06-30 23:59:59.5+00"}', '{}', '{NULL}', '{"a  ",NULL}',
  'it''s "complicated", {really}', '{"it''s \"complicated\", {really}",NULL}',
  2147483647, -9999999999.99, 0, '{}', '{}', '[]',
  ROW(E'a,b "q" \\ (x)', '', NULL, '{NULL,"",NULL}', 'infinity'),
  ROW(NULL, NULL, '{}', '{}', 'infinity', '', NULL),
  ARRAY[NULL, ROW(NULL, NULL, NULL, NULL, NULL)::address],
  'empty', '(,)', '[-infinity,infinity]', '(,)', '{}',
  '::1', '::/0', 'ff:ff:ff:ff:ff:ff', 'ff:ff:ff:ff:ff:ff:ff:ff', -92233720368547758.08,
  B'0000', B'', '', 'a', '', 0,
  '(-1.5,1e+300)', '(0,0),(0,0)', '0/0', '', '', '0'
);

-- Row 3: NULL everywhere but the key.
INSERT INTO alltypes (id) VALUES (3);

-- Row 4: more numbers and timestamps.
INSERT INTO alltypes VALUES (4,
  32767, 2147483647, 9223372036854775807,
  '1234567890123456789012345678901234567890.1234567890', 0.01, '3.4028235e38', '1e-300',
  true, 'NULL', 'null', '"', 'n', ' ',
  '\x00', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '[]', '"just a string"',
  'infinity', '24:00:00', '00:00:00+14:59', '294276-12-31 23:59:59.999999', '1900-01-01 00:00:00+00', '-1 days +02:03:04',
  '{{{1}},{{2}}}', '{{NULL,NULL}}', '{"\\\\",NULL,"n u l l","NuLl"}', '{5e-324,1.7976931348623157e+308,-1.5e-10}', '{-0.000,123e5}',
  '{t}', '{"\\x"}', '{"null","true","1.0e1"}', '{"[]","{}"}', '{-infinity}',
  '{"294276-12-31 23:59:59.999999"}', '{"1970-01-01 00:00:00.000001+00"}', '{(0,0),(0,0)}', '{}', '{}',
  'sad', '{}',
  1, 0.00, 0.10, '{2147483647}', NULL, 'null',
  ROW('', '', 0, '{"a,b","c\"d"}', '1970-01-01 00:00:00+00'),
  ROW('x', ROW(NULL, NULL, NULL, NULL, NULL), NULL, '{"b": {"bb": 1, "a": 2}}', '0001-01-01 BC', NULL, -1),
  '{}',
  '[-2147483648,2147483647)', 'empty', 'empty', '[-1e10,1e-10]', '{[1,2)}',
  '2001:db8::1/64', '192.168.0.0/24', '00:00:00:00:00:00', '00:00:00:00:00:00:00:00', 0,
  B'1111', B'0101010101', 'x:1A y:2B', '!x | (y & z)', '<?xml version="1.0"?><r/>', 1,
  '(0,0)', '(1e-300,0),(0,0)', 'FFFFFFFF/FFFFFFFF', '-32768 32767', '4294967295 0', '18446744073709551615'
);
