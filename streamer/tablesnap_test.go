package streamer

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestParseSnapshot(t *testing.T) {
	for _, tc := range []struct {
		in   string
		xmin uint32
		xip  []uint32
		bad  bool
	}{
		{"748:748:", 748, nil, false},
		{"740:752:740,745,751", 740, []uint32{740, 745, 751}, false},
		// xid8 with an epoch: pgoutput sends the low 32 bits
		{"4294967401:4294967405:4294967402", 105, []uint32{106}, false},
		{"740:752", 0, nil, true},
		{"x:752:", 0, nil, true},
	} {
		xmin, xip, err := parseSnapshot(tc.in)
		if (err != nil) != tc.bad || !tc.bad && (xmin != tc.xmin || !slices.Equal(xip, tc.xip)) {
			t.Errorf("parseSnapshot(%q) = %d, %v, %v; want %d, %v (error %v)", tc.in, xmin, xip, err, tc.xmin, tc.xip, tc.bad)
		}
	}
}

// The chunk statement quotes every identifier, passes the last key as a
// parameter, and reads in key order.
func TestChunkSQL(t *testing.T) {
	m := &pglogrepl.RelationMessage{Namespace: "Shop", RelationName: "order lines", Columns: []*pglogrepl.RelationMessageColumn{
		{Name: "order_id", DataType: 23}, {Name: "line\"no", DataType: 23}, {Name: "qty", DataType: 23}, {Name: "secret", DataType: 25}}}
	r, err := newRelation(m, []string{"order_id", "line\"no"}, "p")
	if err != nil {
		t.Fatal(err)
	}
	first, args := chunkSQL(r, nil, 100)
	want := `SELECT t."order_id", t."line""no", t."qty", t."secret" FROM "Shop"."order lines" t ORDER BY t."order_id", t."line""no" LIMIT 100`
	if first != want || len(args) != 0 {
		t.Errorf("first chunk:\n%s %v\nwant\n%s", first, args, want)
	}
	next, args := chunkSQL(r, json.RawMessage(`{"order_id":7,"line\"no":2}`), 10)
	want = `SELECT t."order_id", t."line""no", t."qty", t."secret" FROM "Shop"."order lines" t WHERE (t."order_id", t."line""no") > (SELECT a."order_id", a."line""no" FROM jsonb_populate_record(NULL::"Shop"."order lines", $1::jsonb) a) ORDER BY t."order_id", t."line""no" LIMIT 10`
	if next != want || len(args) != 1 || args[0] != `{"order_id":7,"line\"no":2}` {
		t.Errorf("next chunk:\n%s %v\nwant\n%s", next, args, want)
	}
}

// A chunk is read again, producing nothing, when a transaction its read
// did not see committed before its low watermark (the history says so),
// or when the table was truncated in its window; history below the read's
// xmin is pruned once a chunk is produced.
func TestEmitChunkRetries(t *testing.T) {
	st := &streamState{}
	j := &tableJob{history: map[uint32]uint64{105: 10, 99: 5}, lowLSN: 20, touched: map[string]bool{}}
	c := &chunk{xmin: 100, xip: []uint32{105}, keys: [][]byte{[]byte(`{"id":1}`)}, rows: [][]byte{[]byte(`{"id":1}`)}}
	if res := st.emitChunk(t.Context(), j, c); res.mark != nil || res.retry == "" {
		t.Fatalf("a transaction invisible to the read committed before the low watermark: %+v, want a retry", res)
	}
	j.history[105] = 30 // committed after the low watermark: its keys are in touched
	j.truncated = true
	if res := st.emitChunk(t.Context(), j, c); res.mark != nil || res.retry == "" {
		t.Fatalf("truncated in the window: %+v, want a retry", res)
	}
	if len(j.history) != 2 {
		t.Fatalf("history pruned by a chunk that was not produced: %v", j.history)
	}
}
