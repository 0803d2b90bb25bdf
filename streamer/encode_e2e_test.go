package streamer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/decant-cdc/decant/internal/testenv"
)

// encAllTypesSQL reads the schema and rows of the table of all types. A
// server built without libxml (the PostgreSQL 18 wheel of e2e/infra/pg.sh)
// cannot even parse an xml value, so there the xml column is text: the
// other ~70 types are still compared, and the test says what it left out.
func encAllTypesSQL(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/encode/alltypes.sql")
	if err != nil {
		t.Fatal(err)
	}
	sql := string(b)
	if !encServerHasLibxml(t) {
		t.Log("the server is built without libxml: c_xml is a text column here")
		sql = strings.Replace(sql, "c_xml xml,", "c_xml text,", 1)
	}
	return sql
}

// encServerHasLibxml reports whether the test server can parse xml; it
// fails the test on any other error.
func encServerHasLibxml(t testing.TB) bool {
	t.Helper()
	testenv.Integration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.PGAdminDSN())
	if err != nil {
		return true // testenv.Postgres reports the missing server
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `SELECT '<r/>'::xml`)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "0A000" { // feature_not_supported: built without libxml
		return false
	}
	if err != nil {
		t.Fatalf("probe xml support: %v", err)
	}
	return true
}

// encSessionParams are the settings of the replication connection, under
// which pgoutput writes the text forms encodeValue reads.
func encSessionParams(tz string) map[string]string {
	return map[string]string{
		"TimeZone":           tz,
		"DateStyle":          "ISO",
		"IntervalStyle":      "postgres",
		"bytea_output":       "hex",
		"extra_float_digits": "1",
	}
}

// TestEncodeMatchesToJSONB is acceptance 1 of issue 3 at the encoder level:
// for every column of a table with one column of each of 70 types (and rows
// of edge values), the text form PostgreSQL's output function gives (what
// pgoutput sends) encodes to exactly to_jsonb() of the value, byte for byte
// once to_jsonb's text is compacted; and encodeTuple of the row equals
// to_jsonb(row) as JSON with exact numbers. The replication connection uses
// TimeZone=UTC; other zones check offsets with minutes and seconds.
func TestEncodeMatchesToJSONB(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Ctx(t)
	pg.Exec(t, encAllTypesSQL(t))

	cols := encColumns(ctx, t, pg, `SELECT attname, atttypid FROM pg_attribute WHERE attrelid = 'alltypes'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`)
	if len(cols) < 31 {
		t.Fatalf("alltypes has %d columns, want at least 31", len(cols))
	}

	types := newPGTypes()
	oids := make([]uint32, len(cols))
	for i, c := range cols {
		oids[i] = c.TypeOID
	}
	if err := types.load(ctx, pg.Pool, oids...); err != nil {
		t.Fatal(err)
	}
	for _, c := range cols {
		if _, ok := types.get(c.TypeOID); !ok {
			t.Errorf("column %s: type %d not loaded", c.Name, c.TypeOID)
		}
	}

	var sel strings.Builder
	for _, c := range cols {
		fmt.Fprintf(&sel, "%s, ", pgx.Identifier{c.Name}.Sanitize())
	}
	for _, c := range cols {
		fmt.Fprintf(&sel, "to_jsonb(%s)::text, ", pgx.Identifier{c.Name}.Sanitize())
	}
	query := "SELECT " + sel.String() + "to_jsonb(t)::text FROM alltypes t ORDER BY id"

	for _, tz := range []string{"UTC", "Asia/Kolkata", "America/St_Johns", "Europe/Amsterdam"} {
		t.Run(strings.ReplaceAll(tz, "/", "_"), func(t *testing.T) {
			cfg, err := pgx.ParseConfig(pg.DSN)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range encSessionParams(tz) {
				cfg.RuntimeParams[k] = v
			}
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())

			// Text result format: each value exactly as the type's output
			// function writes it, which is what pgoutput sends.
			rr := conn.PgConn().ExecParams(ctx, query, nil, nil, nil, nil)
			nrows := 0
			for rr.NextRow() {
				nrows++
				vals := rr.Values()
				id := string(vals[0])
				tuple := &pglogrepl.TupleData{ColumnNum: uint16(len(cols))}
				for i, c := range cols {
					text, want := vals[i], vals[len(cols)+i]
					if text == nil {
						tuple.Columns = append(tuple.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull})
						continue
					}
					tuple.Columns = append(tuple.Columns, &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: bytes.Clone(text)})
					got, err := types.encodeValue(nil, c.TypeOID, text)
					if err != nil {
						t.Errorf("row %s column %s: EncodeValue(%q): %v", id, c.Name, text, err)
						continue
					}
					var compact bytes.Buffer
					if err := json.Compact(&compact, want); err != nil {
						t.Fatalf("row %s column %s: to_jsonb gave invalid JSON %q: %v", id, c.Name, want, err)
					}
					if !bytes.Equal(got, compact.Bytes()) {
						t.Errorf("row %s column %s (%s)\n text      %s\n EncodeValue %s\n to_jsonb    %s", id, c.Name, encTypeName(types, c.TypeOID), text, got, compact.Bytes())
					}
				}
				row, unchanged, err := types.encodeTuple(nil, cols, tuple)
				if err != nil || unchanged != nil {
					t.Fatalf("row %s: EncodeTuple: %v, unchanged %v", id, err, unchanged)
				}
				if g, w := testenv.DecodeExact(t, row), testenv.DecodeExact(t, vals[2*len(cols)]); !reflect.DeepEqual(g, w) {
					t.Errorf("row %s: EncodeTuple differs from to_jsonb(row)\n got  %s\n want %s", id, row, vals[2*len(cols)])
				}
			}
			if _, err := rr.Close(); err != nil {
				t.Fatal(err)
			}
			if nrows != 4 {
				t.Fatalf("read %d rows, want 4", nrows)
			}
		})
	}
}

func encTypeName(types *pgTypes, oid uint32) string {
	if ti, ok := types.get(oid); ok {
		return ti.Name + ", " + ti.Kind.String()
	}
	return fmt.Sprint("unknown type ", oid)
}

// TestEncodeHstoreMatchesToJSONB: to_jsonb uses hstore's cast to json, in
// arrays and composites too. hstore ships with Debian's postgresql-15.
func TestEncodeHstoreMatchesToJSONB(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Ctx(t)
	if _, err := pg.Pool.Exec(ctx, "CREATE EXTENSION hstore"); err != nil {
		t.Fatalf("CREATE EXTENSION hstore: %v (it ships with the postgresql-15 package that e2e/infra/pg.sh installs)", err)
	}
	pg.Exec(t, `CREATE TYPE with_h AS (h hstore, n int);
CREATE TABLE h (id int PRIMARY KEY, h hstore, hs hstore[], c with_h);
INSERT INTO h VALUES
  (1, $$a=>1, "b c"=>NULL, "q\""=>"\\", x=>"", "é"=>"ü", "{}"=>","$$, ARRAY['a=>1'::hstore, NULL, ''], ROW('k=>v', 1)),
  (2, '', '{}', ROW(NULL, NULL))`)
	cols := encColumns(ctx, t, pg, `SELECT attname, atttypid FROM pg_attribute WHERE attrelid = 'h'::regclass AND attnum > 1 ORDER BY attnum`)
	types := newPGTypes()
	for _, c := range cols {
		if err := types.load(ctx, pg.Pool, c.TypeOID); err != nil {
			t.Fatal(err)
		}
	}
	if ti, _ := types.get(cols[0].TypeOID); ti == nil || ti.Kind != kindHstore {
		t.Fatalf("hstore loaded as %+v", ti)
	}
	conn, err := pg.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	res := conn.Conn().PgConn().ExecParams(ctx, "SELECT h, hs, c, to_jsonb(h)::text, to_jsonb(hs)::text, to_jsonb(c)::text FROM h ORDER BY id", nil, nil, nil, nil)
	for res.NextRow() {
		vals := res.Values()
		for i, c := range cols {
			got, err := types.encodeValue(nil, c.TypeOID, vals[i])
			if err != nil {
				t.Errorf("column %s: EncodeValue(%q): %v", c.Name, vals[i], err)
				continue
			}
			var want bytes.Buffer
			if err := json.Compact(&want, vals[len(cols)+i]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Errorf("column %s\n text        %s\n EncodeValue %s\n to_jsonb    %s", c.Name, vals[i], got, want.Bytes())
			}
		}
	}
	if _, err := res.Close(); err != nil {
		t.Fatal(err)
	}
}

// encColumns runs query, which returns (attname, atttypid) rows, and
// returns them as columns.
func encColumns(ctx context.Context, t *testing.T, pg *testenv.PG, query string) []relColumn {
	t.Helper()
	rows, err := pg.Pool.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var cols []relColumn
	for rows.Next() {
		var c relColumn
		if err := rows.Scan(&c.Name, &c.TypeOID); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cols
}
