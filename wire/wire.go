package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Op is the kind of change in a raw event.
type Op string

const (
	OpCreate   Op = "c" // insert
	OpUpdate   Op = "u" // update
	OpDelete   Op = "d" // delete
	OpRead     Op = "r" // row read by the initial snapshot
	OpTruncate Op = "t" // TRUNCATE of the table
)

// Kafka header names set on raw records, for consumers that do not parse values.
const (
	HeaderLSN = "decant-lsn"
	HeaderOp  = "decant-op"
)

// TruncateKey is the Kafka key of a truncate event. It is a JSON object whose
// only member name starts with "$", which no row key can produce because row
// keys are named after columns and decant refuses "$"-prefixed key columns.
var TruncateKey = []byte(`{"$truncate":true}`)

// Source says where in the WAL a change came from.
//
// (CommitLSN, Seq) identifies a change uniquely and increases in commit
// order: a consumer deduplicates at-least-once redelivery by dropping any
// event whose (CommitLSN, Seq) is not greater than the last it applied for
// that key.
type Source struct {
	LSN        string `json:"lsn"`         // LSN of the change record itself
	CommitLSN  string `json:"commit_lsn"`  // LSN of the commit record of its transaction
	XID        uint32 `json:"xid"`         // transaction id
	CommitTime string `json:"commit_time"` // RFC 3339, UTC, milliseconds
	Seq        int64  `json:"seq"`         // position of the change in its transaction, from 0
	Snapshot   bool   `json:"snapshot"`    // true for rows read by the initial snapshot
}

// Change is the value of a raw topic record.
type Change struct {
	Op             Op              `json:"op"`
	Schema         string          `json:"schema"`
	Table          string          `json:"table"`
	Key            json.RawMessage `json:"key"`
	Before         json.RawMessage `json:"before"`
	After          json.RawMessage `json:"after"`
	UnchangedToast []string        `json:"unchanged_toast"`
	Source         Source          `json:"source"`
}

// Ref is the value of a refs topic record: "aggregate Aggregate with this
// record's key must be rebuilt because of a change committed at CommitLSN".
type Ref struct {
	Aggregate string `json:"aggregate"`
	CommitLSN string `json:"lsn"`             // commit LSN of the causing change ("0/0" for backfills)
	XID       uint32 `json:"xid,omitempty"`   // transaction id of the causing change
	Table     string `json:"table,omitempty"` // source table "schema.table", for tracing
	Op        Op     `json:"op,omitempty"`    // op of the causing change, for tracing
	Backfill  bool   `json:"backfill,omitempty"`
	Index     string `json:"index,omitempty"` // for reindex: build only into this concrete index
}

// Document is the value of an aggregate topic record.
type Document struct {
	Aggregate string          `json:"aggregate"`
	ID        json.RawMessage `json:"id"`
	Version   uint64          `json:"version"` // the build's pg_current_wal_lsn() as a number
	LSN       string          `json:"lsn"`     // the same, formatted as an LSN
	Deleted   bool            `json:"deleted"`
	Doc       json.RawMessage `json:"doc"` // null when Deleted
	// Writer is not part of the envelope: in a build stage session it
	// names the refs partition the document was built from, whose fenced
	// writer must write it (internal/fence). Empty outside one (backfill).
	Writer string `json:"-"`
	// Built is not part of the envelope either: the build stage sets it on
	// a document PostgreSQL built, which its json builders make valid JSON
	// and the build stage compacted (AppendCompact), so sinks neither
	// validate nor compact it again (json.Valid in each of two sinks was a
	// tenth of decant's CPU in an initial load).
	Built bool `json:"-"`
	// Envelope is not part of the envelope: when set, it is what
	// AppendEncoded writes for d, and Doc is a slice of it. The build stage
	// writes each document in place in its envelope (FillEnvelope), so the
	// Kafka sink sends it without copying the document again.
	Envelope []byte `json:"-"`
}

// Encode returns the aggregate topic value of d (PRODUCT.md §5):
// {"aggregate","id","version","lsn","deleted","doc"}, compact, in that
// order. LSN is filled from Version when empty; a deleted document has doc
// null. The document's bytes are kept as built (no HTML escaping).
func (d *Document) Encode() ([]byte, error) {
	e := *d
	if e.LSN == "" {
		e.LSN = FormatLSN(e.Version)
	}
	if e.Deleted {
		e.Doc = json.RawMessage("null")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep the document's bytes as built: no \u003c for <
	if err := enc.Encode(&e); err != nil {
		return nil, fmt.Errorf("aggregate %s id %s: encode envelope: %w", d.Aggregate, d.ID, err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// AppendEncoded appends to dst what Encode returns, without checking that
// ID and Doc are valid JSON: the caller has (the sinks check every document
// before they write it); only names that need escaping take Encode's
// path, whose error it returns. It writes the envelope by hand and compacts ID
// and Doc in one pass; encoding/json re-validated every document, a tenth
// of decant's CPU during an initial load.
func (d *Document) AppendEncoded(dst []byte) ([]byte, error) {
	if !plainJSONString(d.Aggregate) || !plainJSONString(d.LSN) {
		b, err := d.Encode()
		return append(dst, b...), err
	}
	dst = d.appendHead(dst)
	if d.Deleted {
		return append(dst, `true,"doc":null}`...), nil
	}
	dst = append(dst, `false,"doc":`...)
	if d.Built {
		dst = append(dst, d.Doc...)
	} else {
		dst = AppendCompact(dst, d.Doc)
	}
	return append(dst, '}'), nil
}

// appendHead appends the envelope up to the value of deleted, for
// Aggregate and LSN that need no escaping.
func (d *Document) appendHead(dst []byte) []byte {
	dst = append(dst, `{"aggregate":"`...)
	dst = append(dst, d.Aggregate...)
	dst = append(dst, `","id":`...)
	dst = AppendCompact(dst, d.ID)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendUint(dst, d.Version, 10)
	dst = append(dst, `,"lsn":"`...)
	if d.LSN == "" {
		dst = AppendLSN(dst, d.Version)
	} else {
		dst = append(dst, d.LSN...)
	}
	return append(dst, `","deleted":`...)
}

// FillEnvelope writes the envelope of d, a built document that is not
// deleted, into a, with the document appendDoc appends (n bytes or fewer
// fit without a copy). It sets Envelope to the envelope and Doc to the
// document inside it. When Aggregate or LSN need escaping, it only sets
// Doc (the sink then encodes the envelope itself).
func (d *Document) FillEnvelope(a *Arena, n int, appendDoc func(dst []byte) []byte) {
	if d.Deleted || !plainJSONString(d.Aggregate) || !plainJSONString(d.LSN) {
		d.Doc, d.Envelope = a.Fill(n, appendDoc), nil
		return
	}
	var from, to int // the document, within the envelope
	d.Envelope = a.Fill(n+len(d.Aggregate)+len(d.ID)+len(d.LSN)+64, func(dst []byte) []byte {
		base := len(dst)
		dst = append(d.appendHead(dst), `false,"doc":`...)
		from = len(dst) - base
		dst = appendDoc(dst)
		to = len(dst) - base
		return append(dst, '}')
	})
	d.Doc = d.Envelope[from:to:to]
}

// plainJSONString says whether s is written as is between quotes by
// encoding/json without HTML escaping: printable ASCII, no quote or
// backslash.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// SnapshotMarker is the value of a record in StateTopic under
// SnapshotKey(Slot): "started" (Done false) when the slot is created, "done"
// once every snapshot row is acknowledged.
type SnapshotMarker struct {
	Slot          string `json:"slot"`
	ConsistentLSN string `json:"consistent_lsn"` // the slot's consistent point
	Done          bool   `json:"done"`
	Time          string `json:"time"` // RFC 3339 with nanoseconds, UTC
}

// TableSnapshot is the value of a record in StateTopic under
// TableSnapshotKey(Slot, Table): the state of one table's online snapshot
// (`decant snapshot`, or a table a mapping starts using). A request has
// Done false and an empty ID; the streamer sets ID when it starts reading
// and LastKey after each chunk whose rows Kafka acknowledged, so a restart
// resumes after LastKey; Done true ends it, Error says why it was given up.
type TableSnapshot struct {
	Slot    string          `json:"slot"`
	Table   string          `json:"table"`              // schema.table
	ID      string          `json:"id,omitempty"`       // LSN the snapshot started at: its rows' source.lsn
	LastKey json.RawMessage `json:"last_key,omitempty"` // key of the last row of the last chunk written
	Rows    int64           `json:"rows"`               // rows written so far
	Done    bool            `json:"done"`
	Error   string          `json:"error,omitempty"`
	Time    string          `json:"time"` // RFC 3339 with nanoseconds, UTC
}

// FormatLSN formats an LSN the way PostgreSQL does ("16/B374D848").
func FormatLSN(lsn uint64) string { return string(AppendLSN(nil, lsn)) }

// AppendLSN appends the LSN's text form to b, without allocating more.
func AppendLSN(b []byte, lsn uint64) []byte {
	b = appendHexUpper(b, lsn>>32)
	b = append(b, '/')
	return appendHexUpper(b, lsn&0xFFFFFFFF)
}

func appendHexUpper(b []byte, v uint64) []byte {
	const digits = "0123456789ABCDEF"
	var buf [16]byte
	i := len(buf)
	for {
		i--
		buf[i] = digits[v&0xF]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(b, buf[i:]...)
}

// ParseLSN parses "16/B374D848".
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("invalid LSN %q: want the form 16/B374D848", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid LSN %q: %w", s, err)
	}
	return h<<32 | l, nil
}

// KeyField is one key column and its JSON-encoded value.
type KeyField struct {
	Name  string
	Value json.RawMessage
}

// Key encodes key columns, in order, as a JSON object: {"a":1,"b":"x"}.
// Values must already be valid JSON (as produced by the value encoder).
func Key(fields []KeyField) []byte {
	n := 2
	for _, f := range fields {
		n += len(f.Name) + len(f.Value) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, f := range fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, f.Name)
		b = append(b, ':')
		if len(f.Value) == 0 {
			b = append(b, "null"...)
		} else {
			b = append(b, f.Value...)
		}
	}
	return append(b, '}')
}

// AppendString appends s as a JSON string, as json.Marshal writes it. A
// string of printable ASCII with nothing to escape (column names, index
// names, most ids) is copied as it is: Key runs for every snapshot row,
// and json.Marshal's reflection was most of its cost.
func AppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
