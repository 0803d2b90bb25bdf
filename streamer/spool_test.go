package streamer

import (
	"bytes"
	"errors"
	"testing"

	"github.com/decant-cdc/decant/wire"
)

// TestSpoolReplaysEntriesInOrder: messages and encoded records come back
// in the order they were added, with their kinds and WAL positions, and an
// encoded record has room for the commit's fields.
func TestSpoolReplaysEntriesInOrder(t *testing.T) {
	sp, err := newSpool(t.TempDir(), 7)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	recs := []encodedRecord{
		{xid: 7, version: 0, op: wire.OpDelete, count: wire.OpUpdate, key: []byte(`{"id":1}`), head: []byte(`{"op":"d"`)},
		{xid: 7, version: 0, op: wire.OpDelete, tomb: true, key: []byte(`{"id":1}`)},
		{xid: 9, version: 3, op: wire.OpCreate, key: []byte(`{"id":2}`), head: []byte(`{"op":"c"`)},
	}
	if err := sp.add(spoolMessage, 10, []byte("Rrelation")); err != nil {
		t.Fatal(err)
	}
	var scratch []byte
	for i, r := range recs {
		if scratch, err = sp.addRecord(uint64(11+i), r, scratch); err != nil {
			t.Fatal(err)
		}
	}
	var got []encodedRecord
	var walStarts []uint64
	err = sp.replay(func(kind byte, walStart uint64, data []byte) error {
		walStarts = append(walStarts, walStart)
		if cap(data)-len(data) < spoolSpare {
			t.Errorf("entry at %d has %d bytes of room, want %d", walStart, cap(data)-len(data), spoolSpare)
		}
		switch kind {
		case spoolMessage:
			if string(data) != "Rrelation" {
				t.Errorf("message = %q", data)
			}
		case spoolRecord:
			r, err := parseEncodedRecord(data)
			if err != nil {
				return err
			}
			got = append(got, r)
		default:
			t.Errorf("kind %q", kind)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(walStarts) != 4 || walStarts[0] != 10 || walStarts[3] != 13 {
		t.Fatalf("WAL positions %v", walStarts)
	}
	for i, r := range recs {
		g := got[i]
		if g.xid != r.xid || g.version != r.version || g.op != r.op || g.count != r.count || g.tomb != r.tomb ||
			!bytes.Equal(g.key, r.key) || !bytes.Equal(g.head, r.head) {
			t.Errorf("record %d = %+v, want %+v", i, g, r)
		}
	}
	// Appending to head must not overwrite the key.
	h := append(got[0].head, `,"more":true}`...)
	if string(got[0].key) != `{"id":1}` || string(h) != `{"op":"d","more":true}` {
		t.Fatalf("key %q head %q", got[0].key, h)
	}
}

func TestParseEncodedRecordRejectsTruncated(t *testing.T) {
	full := appendEncodedRecord(nil, encodedRecord{op: wire.OpCreate, key: []byte(`{"id":1}`), head: []byte(`{}`)})
	for n := 0; n < encodedRecordHeader+len(`{"id":1}`); n++ {
		if _, err := parseEncodedRecord(full[:n]); !errors.Is(err, errShort) {
			t.Fatalf("%d bytes: err = %v, want errShort", n, err)
		}
	}
	r, err := parseEncodedRecord(full)
	if err != nil || string(r.key) != `{"id":1}` || string(r.head) != `{}` || r.op != wire.OpCreate || r.count != "" {
		t.Fatalf("%+v, %v", r, err)
	}
}
