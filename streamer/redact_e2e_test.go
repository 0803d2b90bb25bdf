package streamer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/wire"
)

// TestRedactedColumnsNeverReachRawTopics (issue 18): with streamer.redact,
// an excluded column, a masked one and a hashed one never appear in the
// raw topic — snapshot rows, inserts, updates (before and after images,
// REPLICA IDENTITY FULL), a primary key change and deletes — read record
// by record; masked values hold the mask text, hashed ones the salted
// SHA-256 of the value's JSON, and the other columns are untouched.
func TestRedactedColumnsNeverReachRawTopics(t *testing.T) {
	e := newEnv(t, `CREATE TABLE people (id int PRIMARY KEY, name text, ssn text, email text, phone text);
		ALTER TABLE people REPLICA IDENTITY FULL;
		INSERT INTO people VALUES (1, 'Ada', 'SSN-0001', 'ada@secret.test', '+33-0001'), (2, 'Bob', 'SSN-0002', NULL, NULL);`)
	e.cfg.Redact = map[string]config.Redaction{"public.people": {Exclude: []string{"ssn"}, Mask: []string{"email"}, Hash: []string{"phone"}}}
	e.cfg.MaskText, e.cfg.HashSalt = "[masked]", "pepper"
	e.start()
	e.waitSnapshotMarker()
	e.pg.Exec(t, `INSERT INTO people VALUES (3, 'Cy', 'SSN-0003', 'cy@secret.test', '+33-0003')`)
	e.pg.Exec(t, `UPDATE people SET name = 'Ada L', ssn = 'SSN-0011', email = 'ada2@secret.test', phone = '+33-0011' WHERE id = 1`)
	e.pg.Exec(t, `UPDATE people SET id = 4 WHERE id = 3`)
	e.pg.Exec(t, `DELETE FROM people WHERE id = 2`)

	hash := func(v string) string {
		j, _ := json.Marshal(v)
		h := sha256.Sum256(append([]byte("pepper"), j...))
		return "sha256:" + hex.EncodeToString(h[:])
	}
	// 2 snapshot rows, an insert, an update, a key change (delete,
	// tombstone, create), a delete and its tombstone.
	var recs [][]byte
	for _, r := range e.waitRecords(wire.RawTopic(e.cfg.TopicPrefix, "public", "people"), 9) {
		recs = append(recs, r.Raw)
	}
	events := 0
	for _, raw := range recs {
		if raw == nil {
			continue // tombstone
		}
		for _, secret := range []string{"SSN-", "@secret.test", "+33-", `"ssn"`} {
			if strings.Contains(string(raw), secret) {
				t.Errorf("a raw record holds %q: %s", secret, raw)
			}
		}
		var ev struct {
			Op            string
			Before, After map[string]any
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		events++
		for _, row := range []map[string]any{ev.Before, ev.After} {
			if row == nil {
				continue
			}
			if row["name"] == nil || row["id"] == nil {
				t.Errorf("%s event lost an unredacted column: %v", ev.Op, row)
			}
			id := row["id"].(float64)
			switch email := row["email"]; {
			case id == 2 && email != nil:
				t.Errorf("a null email of row 2 is %v, want null", email)
			case id != 2 && email != "[masked]":
				t.Errorf("row %v: email %v, want the mask text", id, email)
			}
			want := map[float64]any{1: hash("+33-0001"), 2: nil, 3: hash("+33-0003"), 4: hash("+33-0003")}[id]
			if id == 1 && row["name"] == "Ada L" {
				want = hash("+33-0011")
			}
			if row["phone"] != want {
				t.Errorf("row %v: phone %v, want %v", id, row["phone"], want)
			}
		}
	}
	if events < 7 {
		t.Errorf("%d change events in the raw topic, want at least 7", events)
	}
}
