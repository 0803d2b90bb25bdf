package watermark

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/decant-cdc/decant/wire"
)

func TestStatusText(t *testing.T) {
	safe := int64(3 << 20)
	st := &Status{
		Slot:       SlotStatus{Name: "decant", Active: false, ConfirmedLSN: "0/16B3748", LagBytes: 20 << 20, SafeWALBytes: &safe},
		Watermarks: Watermarks{WALLSN: "0/16B3750", Stream: Stage{LSN: "0/16B3748", Lag: 8}, Map: Stage{Lag: 3}},
		DLQ:        2,
		Documents:  map[string]int64{"customer": 7},
		TableSnapshots: []wire.TableSnapshot{{Table: "public.orders", ID: "0/16B0000", LastKey: json.RawMessage(`{"id":200}`), Rows: 180},
			{Table: "public.tags"}, {Table: "public.x", Error: "table public.x has no primary key"}},
	}
	st.Warnings = slotWarnings(st.Slot, "64MB")
	var b bytes.Buffer
	st.WriteText(&b)
	want := `slot decant: INACTIVE, confirmed 0/16B3748, lag 20.0 MiB, 3.0 MiB before max_slot_wal_keep_size
watermarks (WAL now 0/16B3750):
  stream 0/16B3748      lag 8 bytes
  map    behind         lag 3 records
  build  behind         lag 0 records
dead letters: 2 (ever written to the .dlq topic: inspect them with the Kafka console consumer, see docs/operations.md)
documents: customer=7
online snapshot of public.orders: 180 rows so far, after key {"id":200}
online snapshot of public.tags requested, not started
online snapshot of public.x refused: table public.x has no primary key
WARNING: the slot is close to max_slot_wal_keep_size (64MB): start the streamer or raise the limit before WAL is removed
WARNING: no streamer holds the slot: start 'decant run' or 'decant stream'
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
