package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// The golden tests encode fixed values and compare the bytes with
// testdata/*.golden. The values are records captured from a real run
// (e2e.TestWireFormatsMatchGolden with DECANT_CAPTURE_DIR set), with the
// test's random topic and index prefixes replaced by "shop" and none; that
// e2e test checks that what the pipeline writes today still has the
// structure of these files. docs/formats.md shows the same records.
// go test ./wire -update rewrites the files.

func lines(t *testing.T, values ...any) string {
	t.Helper()
	var b strings.Builder
	for _, v := range values {
		var line []byte
		switch v := v.(type) {
		case []byte:
			line = v
		default:
			var err error
			if line, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestChangeGolden: an update of a table with REPLICA IDENTITY FULL.
func TestChangeGolden(t *testing.T) {
	row := func(name string) json.RawMessage {
		return json.RawMessage(`{"id":7,"name":"` + name + `","email":"customer7@example.com","meta":{"level":1},"note":null}`)
	}
	golden(t, "change.golden", lines(t, Change{
		Op: OpUpdate, Schema: "public", Table: "customers", Key: json.RawMessage(`{"id":7}`),
		Before: row("Ken Lovelace"), After: row("Ada Byron"), UnchangedToast: []string{},
		Source: Source{LSN: "0/30C175F8", CommitLSN: "0/30C176C8", XID: 881, CommitTime: "2026-11-30T17:02:35.098Z", Seq: 0, Snapshot: false},
	}))
}

// TestRefGolden: the map stage's ref for that update, and a backfill's.
func TestRefGolden(t *testing.T) {
	golden(t, "ref.golden", lines(t,
		Ref{Aggregate: "customer", CommitLSN: "0/30C176C8", XID: 881, Table: "public.customers", Op: OpUpdate},
		Ref{Aggregate: "customer", CommitLSN: FormatLSN(0), Backfill: true},
	))
}

// TestDocumentGolden: the document built after that update.
func TestDocumentGolden(t *testing.T) {
	d := Document{Aggregate: "customer", ID: json.RawMessage(`{"id":7}`), Version: 817985344,
		Doc: json.RawMessage(`{"id":7,"name":"Ada Byron","email":"customer7@example.com","meta":{"level":1},"orders":[{"id":20006,"total":281.00}]}`)}
	v, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "document.golden", lines(t, v))
}

// TestDeadLetterGolden: one line per kind of dead letter, keys first in
// the test. The stream/encode and index/kafka lines are not captured (no
// PostgreSQL value fails to encode; the Kafka sink's refusal needs a
// document over 1 MiB whose raw event would be refused first), so their
// values are made up.
func TestDeadLetterGolden(t *testing.T) {
	letters := []DeadLetter{
		{Stage: StageStream, Topic: "shop.raw.public.customers", Key: json.RawMessage(`{"id":9}`), ValueBytes: 2560296,
			Reason: "MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept (uncompressed_bytes=2560334)"},
		{Stage: StageMap, Table: "public.orders", Op: OpUpdate, Key: json.RawMessage(`{"id":20006}`), LSN: "0/30C179E0", CommitLSN: "0/30C17A30",
			Aggregates: []string{"customer"}, Missing: []string{"customer_id"},
			Reason: `the before image of this change lacks [customer_id] (the replica identity of public.orders is not FULL): the documents the row belonged to before the change cannot be found and may still contain it; fix: ALTER TABLE "public"."orders" REPLICA IDENTITY FULL; then decant backfill customer`},
		{Stage: StageIndex, Sink: "elasticsearch", Aggregate: "customer", ID: json.RawMessage(`{"id":8}`), Version: 817986144, Index: "customer", Status: 400,
			Reason: `mapper_parsing_exception: failed to parse field [meta.level] of type [long] in document with id '8'. Preview of field's value: 'gold' (caused by illegal_argument_exception: For input string: "gold")`},
		{Stage: StageStream, Table: "public.customers", LSN: "0/30C17B10", Reason: "table public.customers: key column \"id\" not sent by PostgreSQL (type 'u')"},
		{Stage: StageIndex, Sink: "kafka", Aggregate: "customer", ID: json.RawMessage(`{"id":7}`), Version: 817985344, Topic: "shop.agg.customer",
			Reason: "MESSAGE_TOO_LARGE: The request included a message larger than the max message size the server will accept"},
		{Stage: StageMap, Topic: "shop.raw.public.customers", Record: "shop.raw.public.customers/0/4", Key: json.RawMessage(`{"id":7}`), ValueBytes: 12,
			Reason: "invalid character 'o' in literal null (expecting 'u')"},
		{Stage: StageBuild, Topic: "shop.refs.customer", Record: "shop.refs.customer/0/3", Key: json.RawMessage(`{"customer_id":7}`), ValueBytes: 2,
			Reason: `aggregate customer: key {"customer_id":7} has no value for id column "id"`},
	}
	var keys, values []any
	for _, l := range letters {
		k, v := l.Encode()
		keys, values = append(keys, k), append(values, v)
	}
	golden(t, "deadletter.golden", lines(t, values...))
	golden(t, "deadletter_keys.golden", lines(t, keys...))
}
