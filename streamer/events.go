package streamer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/decant-cdc/decant/wire"
)

// relation is what the streamer knows of one published table: pgoutput's
// relation message plus the primary key read from the catalog.
type relation struct {
	id       uint32
	schema   string
	table    string
	cols     []relColumn
	identity []bool // column is part of the replica identity (pgoutput flag 1)
	key      []int  // indexes into cols of the primary key, in key order
	topic    string
	counters map[wire.Op]prometheus.Counter
	names    []byte   // `","schema":"…","table":"…"`, encoded once per relation, not per row
	keyNames [][]byte // `{"col":` then `,"col":` for each key column, encoded once
	// redact, looked up once (redactSet), keeps PII columns out (redact.go).
	redact    *redactor
	redactSet bool
}

// counter is the rows metric of this table and op, cached: label lookups
// per row are measurable at 100k rows/s.
func (r *relation) counter(m *metrics, op wire.Op) prometheus.Counter {
	c, ok := r.counters[op]
	if !ok {
		if r.counters == nil {
			r.counters = map[wire.Op]prometheus.Counter{}
		}
		c = m.rows.WithLabelValues(r.schema+"."+r.table, string(op))
		r.counters[op] = c
	}
	return c
}

// newRelation builds a relation from a pgoutput relation message and the
// table's primary-key column names (from the catalog). A table without a
// primary key is keyed by its replica identity columns, else by every column.
func newRelation(m *pglogrepl.RelationMessage, pk []string, topicPrefix string) (*relation, error) {
	r := &relation{id: m.RelationID, schema: m.Namespace, table: m.RelationName,
		topic: wire.RawTopic(topicPrefix, m.Namespace, m.RelationName)}
	r.names = append([]byte(`","schema":`), appendJSONString(nil, []byte(r.schema))...)
	r.names = append(append(r.names, `,"table":`...), appendJSONString(nil, []byte(r.table))...)
	byName := map[string]int{}
	for i, c := range m.Columns {
		r.cols = append(r.cols, relColumn{Name: c.Name, TypeOID: c.DataType})
		r.identity = append(r.identity, c.Flags&1 == 1)
		byName[c.Name] = i
	}
	for _, name := range pk {
		i, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("table %s.%s: primary key column %q is not in the relation message", r.schema, r.table, name)
		}
		r.key = append(r.key, i)
	}
	if len(r.key) == 0 {
		for i, id := range r.identity {
			if id {
				r.key = append(r.key, i)
			}
		}
	}
	if len(r.key) == 0 {
		for i := range r.cols {
			r.key = append(r.key, i)
		}
	}
	for n, i := range r.key {
		sep := byte(',')
		if n == 0 {
			sep = '{'
		}
		r.keyNames = append(r.keyNames, append(appendJSONString([]byte{sep}, []byte(r.cols[i].Name)), ':'))
	}
	for _, i := range r.key {
		if len(r.cols[i].Name) > 0 && r.cols[i].Name[0] == '$' {
			return nil, fmt.Errorf("table %s.%s: key column %q starts with '$', which decant reserves for control keys; rename the column", r.schema, r.table, r.cols[i].Name)
		}
	}
	return r, nil
}

// sameShape reports whether m describes r's columns (names, types) and
// replica identity.
func (r *relation) sameShape(m *pglogrepl.RelationMessage) bool {
	if len(m.Columns) != len(r.cols) {
		return false
	}
	for i, c := range m.Columns {
		if c.Name != r.cols[i].Name || c.DataType != r.cols[i].TypeOID || (c.Flags&1 == 1) != r.identity[i] {
			return false
		}
	}
	return true
}

// sameColumns reports whether two column lists have the same names and
// types in the same order.
func sameColumns(a []pglogrepl.RelationMessageColumn, b []*pglogrepl.RelationMessageColumn) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].DataType != b[i].DataType {
			return false
		}
	}
	return true
}

// identityIsKey reports whether the replica identity flags of a relation
// message agree with primary key pk: they mark exactly its columns (the
// default identity), every column (FULL) or none (NOTHING). Any other
// marking (another index, or a key changed since pk was read) does not.
func identityIsKey(cols []*pglogrepl.RelationMessageColumn, pk []string) bool {
	flagged, inKey := 0, 0
	isKey := map[string]bool{}
	for _, n := range pk {
		isKey[n] = true
	}
	for _, c := range cols {
		if c.Flags&1 == 1 {
			flagged++
			if isKey[c.Name] {
				inKey++
			}
		}
	}
	return flagged == 0 || flagged == len(cols) || (flagged == len(pk) && inKey == len(pk))
}

// record is one Kafka record to produce: key and value (nil value = tombstone).
type record struct {
	topic string
	key   []byte
	value []byte
	op    wire.Op
}

// txnInfo is the position of the change being encoded.
type txnInfo struct {
	lsn        uint64 // of the change
	commitLSN  uint64
	xid        uint32
	commitTime time.Time
	seq        int64
	snapshot   bool
	// headOnly makes event stop after the change's LSN: the rest is known
	// only at commit (a streamed transaction, see encodedRecord).
	headOnly bool
	// tail caches `","commit_lsn":"…","xid":…,"commit_time":"…","seq":`,
	// the same for every change of a transaction. Setting txnInfo with a
	// literal (as every new transaction does) clears it.
	tail []byte
}

// encoder turns decoded pgoutput messages into records. It is pure: no I/O.
type encoder struct {
	types         *pgTypes
	before, after []byte               // scratch for encoded tuples, copied into events
	redact        map[string]*redactor // "schema.table" → what to keep out of its events
	// snapTuple's Columns point into snapCols: snapshotValues' scratch.
	snapTuple pglogrepl.TupleData
	snapCols  []pglogrepl.TupleDataColumn
}

// keyOf encodes the key columns of a tuple (wire.Key's format).
func (e *encoder) keyOf(r *relation, tuple *pglogrepl.TupleData) ([]byte, error) {
	b := make([]byte, 0, 24*len(r.key))
	for i, ci := range r.key {
		if ci >= len(tuple.Columns) {
			return nil, fmt.Errorf("table %s.%s: tuple has %d columns, key needs column %d", r.schema, r.table, len(tuple.Columns), ci+1)
		}
		b = append(b, r.keyNames[i]...)
		c := tuple.Columns[ci]
		switch c.DataType {
		case pglogrepl.TupleDataTypeText:
			var err error
			n := len(b)
			if b, err = e.types.encodeValue(b, r.cols[ci].TypeOID, c.Data); err != nil {
				b = appendJSONString(b[:n], c.Data)
			}
		case pglogrepl.TupleDataTypeNull:
			b = append(b, "null"...)
		default:
			return nil, fmt.Errorf("table %s.%s: key column %q not sent by PostgreSQL (type %q)", r.schema, r.table, r.cols[ci].Name, c.DataType)
		}
	}
	if len(r.key) == 0 {
		b = append(b, '{')
	}
	return append(b, '}'), nil
}

// identityOnly reports whether an old tuple carries only the replica
// identity columns ('K'), so non-identity nulls mean "not sent".
func identityOnly(oldType uint8) bool { return oldType == 'K' }

// tupleJSON appends a tuple to dst; for 'K' old tuples only identity
// columns are kept.
func (e *encoder) tupleJSON(dst []byte, r *relation, tuple *pglogrepl.TupleData, onlyIdentity bool) ([]byte, []string, error) {
	if !onlyIdentity {
		return e.types.encodeTuple(dst, r.cols, tuple)
	}
	cols := make([]relColumn, 0, len(r.cols))
	sub := &pglogrepl.TupleData{}
	for i, c := range tuple.Columns {
		if i < len(r.identity) && r.identity[i] {
			cols = append(cols, r.cols[i])
			sub.Columns = append(sub.Columns, c)
		}
	}
	sub.ColumnNum = uint16(len(sub.Columns))
	return e.types.encodeTuple(dst, cols, sub)
}

// fillUnchangedToast copies unchanged TOAST values of the new tuple from a
// full old tuple, which holds the same (unchanged) value. It returns the
// names still missing.
func fillUnchangedToast(newT, oldT *pglogrepl.TupleData, oldType uint8) *pglogrepl.TupleData {
	if oldT == nil || oldType != 'O' {
		return newT
	}
	var out *pglogrepl.TupleData
	for i, c := range newT.Columns {
		if c.DataType != pglogrepl.TupleDataTypeToast || i >= len(oldT.Columns) {
			continue
		}
		oc := oldT.Columns[i]
		if oc.DataType != pglogrepl.TupleDataTypeText && oc.DataType != pglogrepl.TupleDataTypeNull {
			continue
		}
		if out == nil {
			out = &pglogrepl.TupleData{ColumnNum: newT.ColumnNum, Columns: append([]*pglogrepl.TupleDataColumn(nil), newT.Columns...)}
		}
		out.Columns[i] = oc
	}
	if out == nil {
		return newT
	}
	return out
}

// change builds the records for one row change. before/after may be nil.
// A delete yields the event and a tombstone; an update that changes the key
// yields delete(old key) + tombstone + create(new key).
func (e *encoder) change(r *relation, op wire.Op, oldT *pglogrepl.TupleData, oldType uint8, newT *pglogrepl.TupleData, at *txnInfo) ([]record, error) {
	var before, after, oldKey, newKey []byte
	var unchanged []string
	var err error
	if oldT != nil {
		if before, _, err = e.tupleJSON(e.before[:0], r, oldT, identityOnly(oldType)); err != nil {
			return nil, err
		}
		e.before = before
		if oldKey, err = e.keyOf(r, oldT); err != nil && op == wire.OpDelete {
			return nil, err
		}
	}
	if newT != nil {
		newT = fillUnchangedToast(newT, oldT, oldType)
		if after, unchanged, err = e.types.encodeTuple(e.after[:0], r.cols, newT); err != nil {
			return nil, err
		}
		e.after = after
		if newKey, err = e.keyOf(r, newT); err != nil {
			return nil, err
		}
	}
	switch op {
	case wire.OpDelete:
		ev := e.event(r, op, oldKey, before, nil, nil, at)
		return []record{{r.topic, oldKey, ev, op}, {r.topic, oldKey, nil, op}}, nil
	case wire.OpUpdate:
		if oldKey != nil && !bytes.Equal(oldKey, newKey) {
			del := e.event(r, wire.OpDelete, oldKey, before, nil, nil, at)
			ins := e.event(r, wire.OpCreate, newKey, nil, after, unchanged, at)
			return []record{{r.topic, oldKey, del, wire.OpDelete}, {r.topic, oldKey, nil, wire.OpDelete}, {r.topic, newKey, ins, wire.OpCreate}}, nil
		}
	}
	ev := e.event(r, op, newKey, before, after, unchanged, at)
	return []record{{r.topic, newKey, ev, op}}, nil
}

// truncate builds the truncate event of one table.
func (e *encoder) truncate(r *relation, at *txnInfo) record {
	return record{r.topic, wire.TruncateKey, e.event(r, wire.OpTruncate, wire.TruncateKey, nil, nil, nil, at), wire.OpTruncate}
}

// snapshotSelect is the select list of a snapshot read of r, from alias
// t: the columns pgoutput sends (r.cols), in its order. Read in text form,
// as pgoutput sends them, snapshotValues encodes them as streamed rows are
// encoded. PostgreSQL's to_jsonb(row), which the snapshot used before,
// cost the server about ten times the CPU of the text forms alone (4.0–4.5
// against 0.3–0.4 CPU-seconds for 750,000 rows of four columns;
// docs/performance.md, twenty-second pass).
func snapshotSelect(r *relation) string {
	cols := make([]string, len(r.cols))
	for i, c := range r.cols {
		cols[i] = "t." + pgx.Identifier{c.Name}.Sanitize()
	}
	return strings.Join(cols, ", ")
}

// snapshotValues encodes one row read by snapshotSelect (vals: the text
// forms, nil for NULL): its key, and the row into dst as the after image
// of a streamed change. The key does not share vals' memory; the row
// shares dst's.
func (e *encoder) snapshotValues(dst []byte, r *relation, vals [][]byte) (key, row []byte, err error) {
	if len(vals) != len(r.cols) {
		return nil, dst, fmt.Errorf("row has %d columns, relation has %d", len(vals), len(r.cols))
	}
	if len(e.snapCols) != len(vals) {
		e.snapCols = make([]pglogrepl.TupleDataColumn, len(vals))
		e.snapTuple.Columns = make([]*pglogrepl.TupleDataColumn, len(vals))
		for i := range e.snapCols {
			e.snapTuple.Columns[i] = &e.snapCols[i]
		}
		e.snapTuple.ColumnNum = uint16(len(vals))
	}
	for i, v := range vals {
		c := &e.snapCols[i]
		c.DataType, c.Data = pglogrepl.TupleDataTypeText, v
		if v == nil {
			c.DataType = pglogrepl.TupleDataTypeNull
		}
	}
	if key, err = e.keyOf(r, &e.snapTuple); err != nil {
		return nil, dst, err
	}
	row, _, err = e.types.encodeTuple(dst, r.cols, &e.snapTuple)
	return key, row, err
}

// snapshotRow builds the record of a row read by the snapshot; row is
// its after image (snapshotValues) and key the encoded primary key.
func (e *encoder) snapshotRow(r *relation, key, row []byte, at *txnInfo) record {
	return record{r.topic, key, e.event(r, wire.OpRead, key, nil, row, nil, at), wire.OpRead}
}

// event encodes a raw change value (PRODUCT.md §2) by hand: this is the hot
// path. It consumes one sequence number of at, unless at.headOnly.
func (e *encoder) event(r *relation, op wire.Op, key, before, after []byte, unchanged []string, at *txnInfo) []byte {
	if !r.redactSet {
		r.redact, r.redactSet = e.redact[r.schema+"."+r.table], true
	}
	if r.redact != nil {
		var errB, errA error
		before, errB = r.redact.apply(before)
		after, errA = r.redact.apply(after)
		if errB != nil || errA != nil {
			// A row decant cannot parse to redact is not written as it is.
			before, after = []byte("null"), []byte("null")
		}
		unchanged = r.redact.names(unchanged)
	}
	b := make([]byte, 0, 200+len(key)+len(before)+len(after)+len(r.names))
	b = append(b, `{"op":"`...)
	b = append(b, op...)
	b = append(b, r.names...)
	b = append(b, `,"key":`...)
	b = append(b, key...)
	b = append(b, `,"before":`...)
	b = appendRaw(b, before)
	b = append(b, `,"after":`...)
	b = appendRaw(b, after)
	b = append(b, `,"unchanged_toast":[`...)
	for i, n := range unchanged {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, []byte(n))
	}
	b = append(b, `],"source":{"lsn":"`...)
	b = wire.AppendLSN(b, at.lsn)
	if at.headOnly {
		return b
	}
	return e.eventTail(b, at)
}

// eventTail completes an event after the change's LSN with the fields of
// its transaction.
func (e *encoder) eventTail(b []byte, at *txnInfo) []byte {
	if at.tail == nil {
		t := append([]byte(nil), `","commit_lsn":"`...)
		t = wire.AppendLSN(t, at.commitLSN)
		t = append(t, `","xid":`...)
		t = strconv.AppendUint(t, uint64(at.xid), 10)
		t = append(t, `,"commit_time":"`...)
		t = at.commitTime.UTC().AppendFormat(t, "2006-01-02T15:04:05.000Z07:00")
		at.tail = append(t, `","seq":`...)
	}
	b = append(b, at.tail...)
	b = strconv.AppendInt(b, at.seq, 10)
	at.seq++
	b = append(b, `,"snapshot":`...)
	b = strconv.AppendBool(b, at.snapshot)
	return append(b, "}}"...)
}

func appendRaw(b, v []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return append(b, v...)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b, s []byte) []byte {
	q, _ := json.Marshal(string(s))
	return append(b, q...)
}
