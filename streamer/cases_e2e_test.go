package streamer

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/decant-cdc/decant/wire"
)

// TestSnapshotThenStream: rows present before the slot exist are emitted as
// op "r", later changes as c/u/d with tombstones, and the last record per
// key equals the table.
func TestSnapshotThenStream(t *testing.T) {
	e := newEnv(t, `CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2));
		INSERT INTO items SELECT g, 'item ' || g, g * 1.5 FROM generate_series(1, 500) g;`)
	e.start()
	topic := wire.RawTopic(e.k.Prefix, "public", "items")
	recs := e.waitRecords(topic, 500)
	for _, r := range recs[:500] {
		if r.Value == nil || r.Value.Op != wire.OpRead || !r.Value.Source.Snapshot {
			t.Fatalf("snapshot record %s: want op r with snapshot=true, got %s", r.Key, r.Raw)
		}
	}
	e.pg.Exec(t, `INSERT INTO items VALUES (1001, 'new', 3.25)`)
	e.pg.Exec(t, `UPDATE items SET name = 'renamed' WHERE id = 2`)
	e.pg.Exec(t, `DELETE FROM items WHERE id = 3`)
	recs = e.waitRecords(topic, 504) // c, u, d, tombstone
	var ops []string
	for _, r := range recs[500:] {
		if r.Value == nil {
			ops = append(ops, "tombstone:"+r.Key)
			continue
		}
		ops = append(ops, string(r.Value.Op)+":"+r.Key)
		if r.Hdr[wire.HeaderOp] != string(r.Value.Op) || r.Hdr[wire.HeaderLSN] == "" {
			t.Errorf("headers of %s = %v", r.Raw, r.Hdr)
		}
	}
	want := []string{`c:{"id":1001}`, `u:{"id":2}`, `d:{"id":3}`, `tombstone:{"id":3}`}
	if strings.Join(ops, " ") != strings.Join(want, " ") {
		t.Fatalf("ops = %v, want %v", ops, want)
	}
	sameState(t, lastPerKey(recs), e.tableState("items", `jsonb_build_object('id', id)::text`))
}

// TestPrimaryKeyUpdateTruncateAndToast covers the special cases of
// PRODUCT.md §2: a key change is delete(old)+tombstone+create(new); TRUNCATE
// is an op "t" event under the reserved key; an unchanged TOASTed value is
// never emitted wrong: listed in unchanged_toast (DEFAULT identity) or
// filled from the old row (FULL identity).
func TestPrimaryKeyUpdateTruncateAndToast(t *testing.T) {
	e := newEnv(t, `CREATE TABLE k (id int PRIMARY KEY, v text);
		CREATE TABLE big (id int PRIMARY KEY, n int, doc text);
		CREATE TABLE bigfull (id int PRIMARY KEY, n int, doc text);
		ALTER TABLE bigfull REPLICA IDENTITY FULL;
		ALTER TABLE big ALTER COLUMN doc SET STORAGE EXTERNAL;
		ALTER TABLE bigfull ALTER COLUMN doc SET STORAGE EXTERNAL;`)
	e.start()
	ktopic := wire.RawTopic(e.k.Prefix, "public", "k")
	e.pg.Exec(t, `INSERT INTO k VALUES (1, 'a')`)
	e.waitRecords(ktopic, 1)
	e.pg.Exec(t, `UPDATE k SET id = 2 WHERE id = 1`)
	recs := e.waitRecords(ktopic, 4)
	if recs[1].Value.Op != wire.OpDelete || recs[1].Key != `{"id":1}` || recs[2].Value != nil || recs[3].Value.Op != wire.OpCreate || recs[3].Key != `{"id":2}` {
		t.Fatalf("PK update: got %s | %s | %s", recs[1].Raw, recs[2].Raw, recs[3].Raw)
	}
	if !jsonEqual(recs[1].Value.Before, []byte(`{"id":1}`)) {
		t.Errorf("PK update delete before = %s, want the old key", recs[1].Value.Before)
	}
	if recs[1].Value.Source.Seq >= recs[3].Value.Source.Seq {
		t.Errorf("seq of delete %d not below create %d", recs[1].Value.Source.Seq, recs[3].Value.Source.Seq)
	}
	e.pg.Exec(t, `TRUNCATE k`)
	recs = e.waitRecords(ktopic, 5)
	if recs[4].Key != string(wire.TruncateKey) || recs[4].Value.Op != wire.OpTruncate || recs[4].Value.Table != "k" {
		t.Fatalf("truncate record = %s %s", recs[4].Key, recs[4].Raw)
	}

	long := strings.Repeat("0123456789", 20000) // 200 kB: stored out of line
	for _, tbl := range []string{"big", "bigfull"} {
		e.pg.Exec(t, `INSERT INTO `+tbl+` VALUES (1, 1, $1)`, long)
		e.pg.Exec(t, `UPDATE `+tbl+` SET n = 2 WHERE id = 1`)
		recs := e.waitRecords(wire.RawTopic(e.k.Prefix, "public", tbl), 2)
		var after map[string]json.RawMessage
		if err := json.Unmarshal(recs[1].Value.After, &after); err != nil {
			t.Fatal(err)
		}
		switch tbl {
		case "big":
			if _, present := after["doc"]; present || len(recs[1].Value.UnchangedToast) != 1 || recs[1].Value.UnchangedToast[0] != "doc" {
				t.Errorf("%s: unchanged TOAST must be omitted and listed; after has doc=%v, unchanged_toast=%v", tbl, len(after["doc"]) > 0, recs[1].Value.UnchangedToast)
			}
		case "bigfull":
			var doc string
			_ = json.Unmarshal(after["doc"], &doc)
			if doc != long {
				t.Logf("record: %.300s", recs[1].Raw)
			}
			if doc != long || len(recs[1].Value.UnchangedToast) != 0 {
				t.Errorf("%s: with REPLICA IDENTITY FULL the unchanged value must be filled from the old row; got %d bytes, unchanged_toast=%v", tbl, len(doc), recs[1].Value.UnchangedToast)
			}
		}
	}
}

// TestSchemaChangesWhileStreaming: ADD COLUMN, ALTER TYPE and DROP COLUMN
// are picked up from relation messages.
func TestSchemaChangesWhileStreaming(t *testing.T) {
	e := newEnv(t, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	e.start()
	topic := wire.RawTopic(e.k.Prefix, "public", "s")
	e.pg.Exec(t, `INSERT INTO s VALUES (1, 10)`)
	e.waitRecords(topic, 1)
	e.pg.Exec(t, `ALTER TABLE s ADD COLUMN b text DEFAULT 'x'`)
	e.pg.Exec(t, `INSERT INTO s VALUES (2, 20, 'y')`)
	e.pg.Exec(t, `ALTER TABLE s ALTER COLUMN a TYPE numeric USING a / 3.0`)
	e.pg.Exec(t, `INSERT INTO s VALUES (3, 1.25, 'z')`)
	e.pg.Exec(t, `ALTER TABLE s DROP COLUMN b`)
	e.pg.Exec(t, `INSERT INTO s VALUES (4, 4.5)`)
	recs := e.waitRecords(topic, 4)
	want := []string{`{"id":1,"a":10}`, `{"id":2,"a":20,"b":"y"}`, `{"id":3,"a":1.25,"b":"z"}`, `{"id":4,"a":4.5}`}
	for i, w := range want {
		if !jsonEqual(recs[i].Value.After, []byte(w)) {
			t.Errorf("record %d after = %s, want %s", i, recs[i].Value.After, w)
		}
	}
	_ = context.Background
}
