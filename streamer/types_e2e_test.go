package streamer

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/decant-cdc/decant/wire"
)

// TestStreamedValuesEqualToJSONB is acceptance 1 of issue 3 end to end: rows
// of a table with one column of each of ~70 types (testdata/encode) are
// inserted and then updated after the slot exists, so they travel through
// pgoutput, the replication connection's session settings and the encoder;
// every streamed "after" must equal to_jsonb(row) as JSON with exact numbers.
func TestStreamedValuesEqualToJSONB(t *testing.T) {
	e := newEnv(t, encAllTypesSQL(t)+`
		CREATE TABLE streamed (LIKE alltypes INCLUDING ALL);
		ALTER TABLE streamed REPLICA IDENTITY FULL;`)
	e.start()
	e.waitSnapshotMarker()
	e.pg.Exec(t, `INSERT INTO streamed SELECT * FROM alltypes`)
	var n int
	if err := e.pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM streamed`).Scan(&n); err != nil || n < 3 {
		t.Fatalf("rows in streamed = %d (%v)", n, err)
	}
	e.pg.Exec(t, `UPDATE streamed SET id = id`) // every row again, as an update with a FULL before image
	recs := e.waitRecords(wire.RawTopic(e.k.Prefix, "public", "streamed"), 2*n)
	checked := requireToJSONB(t, recs, e.tableState("streamed", `jsonb_build_object('id', id)::text`), wire.OpCreate, wire.OpUpdate)
	if checked != 2*n {
		t.Fatalf("checked %d events equal to to_jsonb, want %d", checked, 2*n)
	}
	var cols int
	_ = e.pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_attribute WHERE attrelid = 'streamed'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&cols)
	t.Logf("%d rows × %d columns streamed as inserts and updates equal to_jsonb", n, cols)
}

// TestSnapshotValuesEqualToJSONB: rows of the same ~70 types present
// before the slot exists are read by the initial snapshot in text form and
// encoded as streamed rows are; every snapshot row must equal
// to_jsonb(row) as JSON with exact numbers, and its key the key of the
// same row streamed.
func TestSnapshotValuesEqualToJSONB(t *testing.T) {
	e := newEnv(t, encAllTypesSQL(t))
	e.start()
	var n int
	if err := e.pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM alltypes`).Scan(&n); err != nil || n < 3 {
		t.Fatalf("rows in alltypes = %d (%v)", n, err)
	}
	recs := e.waitRecords(wire.RawTopic(e.k.Prefix, "public", "alltypes"), n)
	if checked := requireToJSONB(t, recs[:n], e.tableState("alltypes", `jsonb_build_object('id', id)::text`), wire.OpRead); checked != n {
		t.Fatalf("checked %d snapshot rows equal to to_jsonb, want %d", checked, n)
	}
}

// requireToJSONB checks every record of recs with one of ops against want
// (key → to_jsonb(row)): its after image, and an update's before image,
// must equal the row. It returns how many records were equal.
func requireToJSONB(t *testing.T, recs []rawRecord, want map[string]json.RawMessage, ops ...wire.Op) int {
	t.Helper()
	checked := 0
	for _, r := range recs {
		if r.Value == nil || !slices.Contains(ops, r.Value.Op) {
			continue
		}
		w, ok := want[r.Key]
		if !ok {
			t.Fatalf("key %s (op %s) not in the table", r.Key, r.Value.Op)
		}
		if !jsonEqual(r.Value.After, w) {
			var got, exp map[string]json.RawMessage
			_ = json.Unmarshal(r.Value.After, &got)
			_ = json.Unmarshal(w, &exp)
			for col, v := range exp {
				if !jsonEqual(got[col], v) {
					t.Errorf("key %s op %s column %s: encoded %s, to_jsonb %s", r.Key, r.Value.Op, col, got[col], v)
				}
			}
			continue
		}
		if r.Value.Op == wire.OpUpdate && !jsonEqual(r.Value.Before, w) {
			t.Errorf("key %s: before image %s differs from to_jsonb %s", r.Key, r.Value.Before, w)
		}
		checked++
	}
	return checked
}
