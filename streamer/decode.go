package streamer

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/decant-cdc/decant/wire"
)

// rowMessage is a decoded pgoutput Insert, Update or Delete.
type rowMessage struct {
	op       wire.Op
	xid      uint32 // the (sub)transaction, inside a stream block only
	relation uint32
	oldType  uint8 // 'K' (key columns only), 'O' (whole old row) or 0
	old, new *pglogrepl.TupleData
}

// rowDecoder decodes row messages without copying: column values are
// slices of the message, and the tuples are reused from one message to the
// next. Both are valid only until the next decode, which suits the
// replication loop (it encodes each change before reading the next one) and
// saves an allocation and a byte-by-byte copy per column that pglogrepl's
// decoder makes. Every length is checked against the message.
type rowDecoder struct {
	cols [2][]pglogrepl.TupleDataColumn
	ptrs [2][]*pglogrepl.TupleDataColumn
	tup  [2]pglogrepl.TupleData
	msg  rowMessage
}

var errShort = errors.New("message truncated")

// isRowMessage reports whether a message of this type is for decodeRow.
func isRowMessage(typ byte) bool {
	return typ == byte(pglogrepl.MessageTypeInsert) || typ == byte(pglogrepl.MessageTypeUpdate) || typ == byte(pglogrepl.MessageTypeDelete)
}

// decode decodes an Insert ('I'), Update ('U') or Delete ('D') message; in a
// stream block (protocol 2) the message starts with the xid.
func (d *rowDecoder) decode(data []byte, inStream bool) (*rowMessage, error) {
	m := &d.msg
	*m = rowMessage{}
	typ, src := data[0], data[1:]
	switch typ {
	case 'I':
		m.op = wire.OpCreate
	case 'U':
		m.op = wire.OpUpdate
	case 'D':
		m.op = wire.OpDelete
	default:
		return nil, fmt.Errorf("not a row message: type %q", typ)
	}
	if inStream {
		if len(src) < 4 {
			return nil, errShort
		}
		m.xid, src = binary.BigEndian.Uint32(src), src[4:]
	}
	if len(src) < 5 {
		return nil, errShort
	}
	m.relation, src = binary.BigEndian.Uint32(src), src[4:]
	var err error
	if src[0] == 'K' || src[0] == 'O' {
		if typ == 'I' {
			return nil, fmt.Errorf("insert with an old tuple (%q)", src[0])
		}
		m.oldType = src[0]
		if m.old, src, err = d.tuple(0, src[1:]); err != nil {
			return nil, fmt.Errorf("old tuple: %w", err)
		}
		if typ == 'D' {
			return m, nil
		}
		if len(src) == 0 {
			return nil, errShort
		}
	}
	if src[0] != 'N' || typ == 'D' {
		return nil, fmt.Errorf("unexpected tuple type %q", src[0])
	}
	if m.new, _, err = d.tuple(1, src[1:]); err != nil {
		return nil, fmt.Errorf("new tuple: %w", err)
	}
	return m, nil
}

// tuple decodes one TupleData into slot i and returns the rest of src.
func (d *rowDecoder) tuple(i int, src []byte) (*pglogrepl.TupleData, []byte, error) {
	if len(src) < 2 {
		return nil, nil, errShort
	}
	n := int(binary.BigEndian.Uint16(src))
	src = src[2:]
	if n > len(src) { // every column takes at least one byte
		return nil, nil, errShort
	}
	cols := d.cols[i][:0]
	for range n {
		if len(src) == 0 {
			return nil, nil, errShort
		}
		c := pglogrepl.TupleDataColumn{DataType: src[0]}
		src = src[1:]
		switch c.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if len(src) < 4 {
				return nil, nil, errShort
			}
			c.Length, src = binary.BigEndian.Uint32(src), src[4:]
			if uint64(c.Length) > uint64(len(src)) {
				return nil, nil, errShort
			}
			c.Data, src = src[:c.Length:c.Length], src[c.Length:]
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		default:
			return nil, nil, fmt.Errorf("unknown column kind %q", c.DataType)
		}
		cols = append(cols, c)
	}
	ptrs := d.ptrs[i][:0]
	for k := range cols {
		ptrs = append(ptrs, &cols[k])
	}
	d.cols[i], d.ptrs[i] = cols, ptrs
	d.tup[i] = pglogrepl.TupleData{ColumnNum: uint16(n), Columns: ptrs}
	return &d.tup[i], src, nil
}

// parseMessage decodes any other pgoutput message (protocol 1 or 2). A
// malformed message is an error, never a panic or a huge allocation:
// pglogrepl's decoders trust the lengths in their input.
func parseMessage(data []byte, inStream bool) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, errors.New("empty message")
	}
	if data[0] == byte(pglogrepl.MessageTypeTruncate) {
		// Byte1('T') [Int32 xid] Int32 count, Int8 options, count × Int32.
		head := 1
		if inStream {
			head += 4
		}
		if len(data) < head+5 || uint64(binary.BigEndian.Uint32(data[head:]))*4 > uint64(len(data)-head-5) {
			return nil, fmt.Errorf("malformed truncate message: %w", errShort)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("malformed pgoutput message of type %q (%d bytes): %v", data[0], len(data), r)
		}
	}()
	return pglogrepl.ParseV2(data, inStream)
}
