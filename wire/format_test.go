package wire

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite wire/testdata/*.golden from the values in the tests")

// golden compares got with testdata/name byte for byte; -update rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./wire -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test ./wire -update rewrites it):\n got: %s\nwant: %s", path, got, want)
	}
}

func TestTopicNames(t *testing.T) {
	for got, want := range map[string]string{
		RawTopic("shop", "public", "customers"):           "shop.raw.public.customers",
		StateTopic("shop"):                                "shop.state",
		RefsTopic("shop", "customer"):                     "shop.refs.customer",
		AggTopic("shop", "customer"):                      "shop.agg.customer",
		DLQTopic("shop"):                                  "shop.dlq",
		SnapshotKey("decant_shop"):                        "snapshot/decant_shop",
		TableSnapshotKey("decant_shop", "public.reviews"): "tablesnap/decant_shop/public.reviews",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}

// The online table snapshot state (docs/formats.md, "Snapshot state
// topic"): a request has no id nor last_key.
func TestTableSnapshotFormat(t *testing.T) {
	for _, tc := range []struct {
		ts   TableSnapshot
		want string
	}{
		{TableSnapshot{Slot: "decant_shop", Table: "public.reviews", Time: "2026-12-01T10:00:00Z"},
			`{"slot":"decant_shop","table":"public.reviews","rows":0,"done":false,"time":"2026-12-01T10:00:00Z"}`},
		{TableSnapshot{Slot: "decant_shop", Table: "public.reviews", ID: "0/3A0B1C8", LastKey: json.RawMessage(`{"id":30000}`), Rows: 29950, Done: true, Time: "2026-12-01T10:00:09Z"},
			`{"slot":"decant_shop","table":"public.reviews","id":"0/3A0B1C8","last_key":{"id":30000},"rows":29950,"done":true,"time":"2026-12-01T10:00:09Z"}`},
	} {
		b, err := json.Marshal(tc.ts)
		if err != nil || string(b) != tc.want {
			t.Errorf("got %s (%v), want %s", b, err, tc.want)
		}
	}
}

// TestEnvelopeGolden pins the aggregate topic value (PRODUCT.md §5) on
// edge cases: HTML characters and big numbers kept as built, LSN filled
// from the version, a deleted document's doc null, spaced JSON compacted.
func TestEnvelopeGolden(t *testing.T) {
	docs := []Document{
		{Aggregate: "customer", ID: json.RawMessage(`{"id":7}`), Version: 23803720, Deleted: false,
			Doc: json.RawMessage(`{"id":7,"name":"Ann <ann@example.com>","orders":[{"id":1,"total":19.90}],"big":12345678901234567890}`)},
		{Aggregate: "customer", ID: json.RawMessage(`{"id":8}`), Version: 0x16B3748, LSN: "0/16B3748", Deleted: true},
		{Aggregate: "line", ID: json.RawMessage(`{"order_id":7, "line_no":2}`), Version: 1 << 32, Doc: json.RawMessage("{\n  \"qty\": 3\n}")},
	}
	var got strings.Builder
	for i := range docs {
		b, err := docs[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		got.Write(b)
		got.WriteByte('\n')
	}
	golden(t, "envelope.golden", got.String())
}

func TestDeadLetterEncode(t *testing.T) {
	l := DeadLetter{Stage: StageIndex, Sink: "elasticsearch", Aggregate: "customer", ID: json.RawMessage(`{"id":7}`), Version: 42,
		Index: "customers", Status: 400, Reason: "mapper_parsing_exception: x"}
	want := `{"stage":"index","sink":"elasticsearch","aggregate":"customer","id":{"id":7},"version":42,"index":"customers","status":400,"reason":"mapper_parsing_exception: x"}`
	if key, value := l.Encode(); string(value) != want || string(key) != `{"id":7}` {
		t.Errorf("dead letter\n got %s %s\nwant {\"id\":7} %s", key, value, want)
	}
	// An id that is not JSON is still written, as a string; the key keeps its bytes.
	bad := DeadLetter{Stage: StageIndex, Sink: "kafka", Aggregate: "c", ID: json.RawMessage(`{"id":`), Reason: "r"}
	if key, value := bad.Encode(); !json.Valid(value) || string(key) != `{"id":` {
		t.Errorf("a dead letter for an invalid id must still be JSON: %s %s", key, value)
	}
	// A row that cannot be encoded is keyed by its table.
	key, value := DeadLetter{Stage: StageStream, Table: `public.a"b`, LSN: "0/1", Reason: "<x>"}.Encode()
	if string(key) != `{"table":"public.a\"b"}` || string(value) != `{"stage":"stream","table":"public.a\"b","lsn":"0/1","reason":"\u003cx\u003e"}` {
		t.Errorf("stream dead letter: %s %s", key, value)
	}
}

// AppendEncoded writes the same bytes as Encode for every checked
// document: spaced documents and ids are compacted, deleted ones carry
// doc null, an empty LSN comes from the version, and names that need
// escaping take Encode's path.
func TestAppendEncodedMatchesEncode(t *testing.T) {
	docs := []Document{
		{Aggregate: "customer", ID: json.RawMessage(`{"id":7}`), Version: 23803720, LSN: "0/16B3748", Doc: json.RawMessage(`{"id":7,"name":"Ada <&> \u00e9","tags":["vip"]}`)},
		{Aggregate: "customer", ID: json.RawMessage(`{"id": 7}`), Version: 23803720, Doc: json.RawMessage("{\"a\": [1, 2],\n \"b\": {\"c\": \"x y\"}}")},
		{Aggregate: "order_line", ID: json.RawMessage(`{"order_id":7,"line_no":2}`), Version: 1, LSN: "0/1", Deleted: true, Doc: json.RawMessage(`{"stale":true}`)},
		{Aggregate: "order_line", ID: json.RawMessage(`{"order_id":7,"line_no":2}`), Version: 1, Deleted: true},
		{Aggregate: `we"ird\né`, ID: json.RawMessage(`{"id":"x"}`), Version: 9, Doc: json.RawMessage(`{}`)},
	}
	for i := range docs {
		want, err := docs[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := docs[i].AppendEncoded([]byte("prefix")); err != nil || string(got) != "prefix"+string(want) {
			t.Errorf("document %d (err %v):\nAppendEncoded %s\nEncode        %s", i, err, got, want)
		}
		// A built document (compacted by the build stage) is copied as
		// it is, to the same envelope.
		built := docs[i]
		built.Doc, built.Built = AppendCompact(nil, built.Doc), !built.Deleted
		if got, err := built.AppendEncoded(nil); err != nil || string(got) != string(want) {
			t.Errorf("built document %d (err %v):\nAppendEncoded %s\nEncode        %s", i, err, got, want)
		}
		// The build stage writes a document in place in its envelope:
		// the same bytes, with Doc inside them.
		if docs[i].Deleted {
			continue
		}
		filled := Document{Aggregate: docs[i].Aggregate, ID: docs[i].ID, Version: docs[i].Version, LSN: docs[i].LSN, Built: true}
		var a Arena
		a.Fill(6, func(dst []byte) []byte { return append(dst, "before"...) })
		filled.FillEnvelope(&a, len(docs[i].Doc), func(dst []byte) []byte { return AppendCompact(dst, docs[i].Doc) })
		if string(filled.Doc) != string(built.Doc) || cap(filled.Doc) != len(filled.Doc) {
			t.Errorf("filled document %d: Doc %s (cap %d), want %s", i, filled.Doc, cap(filled.Doc), built.Doc)
		}
		switch {
		case filled.Envelope == nil && plainJSONString(filled.Aggregate):
			t.Errorf("filled document %d: no envelope", i)
		case filled.Envelope != nil && string(filled.Envelope) != string(want):
			t.Errorf("filled document %d:\nEnvelope %s\nEncode   %s", i, filled.Envelope, want)
		}
		if got, err := filled.AppendEncoded(nil); err != nil || string(got) != string(want) {
			t.Errorf("filled document %d (err %v): AppendEncoded %s", i, err, got)
		}
	}
}
