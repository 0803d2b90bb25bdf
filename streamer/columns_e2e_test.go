package streamer

import (
	"context"
	"encoding/json"
	"reflect"
	"sort"
	"testing"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// TestSnapshotColumnsAsPublished: snapshot ("r") and streamed ("c") records
// of a table carry the same columns, the ones the publication publishes
// (the streamed records say which, pgoutput being the oracle): a column
// list (15+) leaves columns out;
// a stored generated column is published on 18 with
// publish_generated_columns = stored, never before; a virtual generated
// column (18) never is. Values equal to_jsonb of the row restricted to
// those columns. Regression test for PostgreSQL 18 (issue 16), see
// TestPublishedColumns.
func TestSnapshotColumnsAsPublished(t *testing.T) {
	pg := testenv.Postgres(t)
	major, err := testenv.ServerMajor(context.Background(), pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if major < 15 {
		t.Fatalf("PostgreSQL %d: decant's tests need 15 or later (publication column lists)", major)
	}
	gDDL, pub := `CREATE TABLE g (id int PRIMARY KEY, a int, s int GENERATED ALWAYS AS (a * 2) STORED, b text)`, ``
	wantG := []string{"a", "b", "id"}
	if major >= 18 {
		gDDL = `CREATE TABLE g (id int PRIMARY KEY, a int, s int GENERATED ALWAYS AS (a * 2) STORED, v int GENERATED ALWAYS AS (a * 3) VIRTUAL, b text)`
		pub = ` WITH (publish_generated_columns = stored)`
		wantG = []string{"a", "b", "id", "s"}
	}
	pg.Exec(t, gDDL+`;
		CREATE TABLE c (id int PRIMARY KEY, a int, b text);
		INSERT INTO g (id, a, b) VALUES (1, 10, 'x'), (2, 20, 'y');
		INSERT INTO c VALUES (1, 10, 'x'), (2, 20, 'y');
		CREATE PUBLICATION decant FOR TABLE g, c (id, b)`+pub)
	e := &env{t: t, pg: pg, k: testenv.Kafka(t)}
	e.cfg = newEnvConfig(pg, e.k)
	e.start()
	e.waitSnapshotMarker()
	pg.Exec(t, `INSERT INTO g (id, a, b) VALUES (3, 30, 'z'); INSERT INTO c VALUES (3, 30, 'z')`)

	for _, tc := range []struct {
		table string
		want  []string
	}{{"g", wantG}, {"c", []string{"b", "id"}}} {
		recs := e.waitRecords(wire.RawTopic(e.k.Prefix, "public", tc.table), 3)
		oracle := e.tableState(tc.table, `jsonb_build_object('id', id)::text`)
		for _, r := range recs {
			var after map[string]json.RawMessage
			if err := json.Unmarshal(r.Value.After, &after); err != nil {
				t.Fatalf("%s %s: %v", tc.table, r.Raw, err)
			}
			var got []string
			for k := range after {
				got = append(got, k)
			}
			sort.Strings(got)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s op %s key %s: columns %v, published %v", tc.table, r.Value.Op, r.Key, got, tc.want)
			}
			var row map[string]json.RawMessage
			if err := json.Unmarshal(oracle[r.Key], &row); err != nil {
				t.Fatalf("%s key %s: to_jsonb %s: %v", tc.table, r.Key, oracle[r.Key], err)
			}
			for _, col := range tc.want {
				if !jsonEqual(after[col], row[col]) {
					t.Errorf("%s op %s key %s column %s: %s, to_jsonb %s", tc.table, r.Value.Op, r.Key, col, after[col], row[col])
				}
			}
		}
	}
}
