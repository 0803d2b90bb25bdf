package wire

import (
	"encoding/json"
	"strconv"
)

// The map stage decodes every live change and the before and after
// images in it, and the build stage every ref: with encoding/json that was
// 28% of decant's CPU while it drained a backlog of live changes
// (docs/performance.md, "Twelfth pass"), which validates each value, then
// decodes it by reflection and copies every raw value. The decoders here
// read the form decant writes in one pass, without reflection, and leave
// raw values pointing into the record's bytes; anything they do not fully
// understand — escaped or non-ASCII names and strings, repeated or
// unknown names (encoding/json matches names case-insensitively),
// numbers that are not plain integers in range, a value of another type —
// goes to encoding/json, so both give the same answers and the same
// errors (FuzzDecodeChange, FuzzDecodeRef, FuzzScanObject).

// maxDepth bounds the nesting ScanObject follows in a value; deeper values
// go to encoding/json (which allows 10,000 levels).
const maxDepth = 64

// ScanObject parses data when it is one JSON object whose member names
// are plain ASCII (no escapes), with any valid JSON values, and returns
// its members in order, repeated names included. ok is false for
// anything else, valid JSON or not. The members' names and values point
// into data, with no room to grow in it.
func ScanObject(data []byte, buf []FlatMember) (ms []FlatMember, ok bool) {
	ms, end, ok := scanObject(data, skipJSONSpace(data, 0), buf, 0)
	if !ok || skipJSONSpace(data, end) != len(data) {
		return nil, false
	}
	return ms, true
}

// scanObject reads the object at b[i] and returns its members and the
// index after it.
func scanObject(b []byte, i int, buf []FlatMember, depth int) (ms []FlatMember, end int, ok bool) {
	ms = buf[:0]
	if i >= len(b) || b[i] != '{' {
		return nil, 0, false
	}
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return ms, i + 1, true
	}
	for {
		name, next, ok := scanPlainString(b, i)
		if !ok {
			return nil, 0, false
		}
		i = skipJSONSpace(b, next)
		if i == len(b) || b[i] != ':' {
			return nil, 0, false
		}
		i = skipJSONSpace(b, i+1)
		end, ok := skipValue(b, i, depth+1)
		if !ok {
			return nil, 0, false
		}
		// Capacity cut at the end: an append to a value must not write
		// over the rest of the record.
		ms = append(ms, FlatMember{Name: name[:len(name):len(name)], Value: b[i:end:end]})
		var more bool
		if i, more, ok = afterItem(b, end, '}'); !ok || !more {
			return ms, i, ok
		}
	}
}

// afterItem reads what follows a member or an element ending at b[i]: a
// comma, and more to come at next, or the closing byte, with next after
// it.
func afterItem(b []byte, i int, closing byte) (next int, more, ok bool) {
	if i = skipJSONSpace(b, i); i == len(b) {
		return 0, false, false
	}
	switch b[i] {
	case ',':
		return skipJSONSpace(b, i+1), true, true
	case closing:
		return i + 1, false, true
	}
	return 0, false, false
}

// skipValue returns the end of the valid JSON value at b[i].
func skipValue(b []byte, i, depth int) (end int, ok bool) {
	if i >= len(b) || depth > maxDepth {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{':
		i = skipJSONSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			next, ok := skipString(b, i)
			if !ok {
				return 0, false
			}
			i = skipJSONSpace(b, next)
			if i == len(b) || b[i] != ':' {
				return 0, false
			}
			if i, ok = skipValue(b, skipJSONSpace(b, i+1), depth+1); !ok {
				return 0, false
			}
			var more bool
			if i, more, ok = afterItem(b, i, '}'); !ok || !more {
				return i, ok
			}
		}
	case '[':
		i = skipJSONSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok, more bool
			if i, ok = skipValue(b, i, depth+1); !ok {
				return 0, false
			}
			if i, more, ok = afterItem(b, i, ']'); !ok || !more {
				return i, ok
			}
		}
	}
	end, ok = scanFlatValue(b, i) // number, true, false, null (and plain strings, handled above)
	if ok && end < len(b) && isLiteralByte(b[end]) {
		return 0, false // "truex", "1x": the caller would reject what follows anyway
	}
	return end, ok
}

func isLiteralByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '+' || c == '-'
}

// skipString returns the index after the valid JSON string at b[i]:
// escapes as JSON defines them, no control characters, any other bytes
// (encoding/json accepts invalid UTF-8 in a raw value, as here).
func skipString(b []byte, i int) (end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			j++
			if j == len(b) {
				return 0, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(b) {
					return 0, false
				}
				for _, h := range b[j+1 : j+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return 0, false
					}
				}
				j += 4
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

// fields decodes the members of an object into a struct's fields, the
// fast path's way: set is called per member with its name and value and
// reports whether it understood both; each name may appear once.
func fields(ms []FlatMember, names []string, set func(field int, v []byte) bool) bool {
	var seen uint64
	for _, m := range ms {
		f := -1
		for k, n := range names {
			if string(m.Name) == n {
				f = k
				break
			}
		}
		if f < 0 || seen&(1<<f) != 0 || !set(f, m.Value) {
			return false
		}
		seen |= 1 << f
	}
	return true
}

func isNull(v []byte) bool { return string(v) == "null" }

// plainString decodes v when it is a plain string (null leaves dst as it is).
func plainString(v []byte, dst *string) bool {
	if isNull(v) {
		return true
	}
	s, next, ok := scanPlainString(v, 0)
	if !ok || next != len(v) {
		return false
	}
	*dst = string(s)
	return true
}

func plainUint32(v []byte, dst *uint32) bool {
	if isNull(v) {
		return true
	}
	n, err := strconv.ParseUint(string(v), 10, 32)
	if err != nil || v[0] == '0' && len(v) > 1 {
		return false
	}
	*dst = uint32(n)
	return true
}

func plainInt64(v []byte, dst *int64) bool {
	if isNull(v) {
		return true
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || v[0] == '+' || v[0] == '0' && len(v) > 1 || v[0] == '-' && (len(v) < 2 || v[1] == '0') {
		return false
	}
	*dst = n
	return true
}

func plainBool(v []byte, dst *bool) bool {
	switch string(v) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	case "null":
	default:
		return false
	}
	return true
}

// plainStrings decodes v when it is null or an array of plain strings.
func plainStrings(v []byte, dst *[]string) bool {
	if isNull(v) {
		*dst = nil
		return true
	}
	if v[0] != '[' {
		return false
	}
	out := []string{}
	i := skipJSONSpace(v, 1)
	if i < len(v) && v[i] == ']' {
		*dst = out
		return i+1 == len(v)
	}
	for {
		s, next, ok := scanPlainString(v, i)
		if !ok {
			return false
		}
		out = append(out, string(s))
		var more bool
		if i, more, ok = afterItem(v, next, ']'); !ok {
			return false
		}
		if !more {
			*dst = out
			return i == len(v)
		}
	}
}

var (
	changeFields = []string{"op", "schema", "table", "key", "before", "after", "unchanged_toast", "source"}
	sourceFields = []string{"lsn", "commit_lsn", "xid", "commit_time", "seq", "snapshot"}
	refFields    = []string{"aggregate", "lsn", "xid", "table", "op", "backfill", "index"}
)

// DecodeChange decodes a raw topic record's value as json.Unmarshal
// would into a zero Change. Its raw values (Key, Before, After) may point
// into data.
func DecodeChange(data []byte, ch *Change) error {
	return decodeOr(data, ch, decodeChangeFast)
}

// decodeOr decodes data into a zero *v with fast, or else with
// encoding/json.
func decodeOr[T any](data []byte, v *T, fast func([]byte, *T) bool) error {
	if fast(data, v) {
		return nil
	}
	var zero T
	*v = zero
	return json.Unmarshal(data, v)
}

// decodeChangeFast is DecodeChange's fast path; false leaves ch to be
// reset.
func decodeChangeFast(data []byte, ch *Change) bool {
	*ch = Change{}
	var buf [8]FlatMember
	ms, ok := ScanObject(data, buf[:])
	return ok && fields(ms, changeFields, func(f int, v []byte) bool {
		switch f {
		case 0:
			var s string
			ok := plainString(v, &s)
			ch.Op = Op(s)
			return ok
		case 1:
			return plainString(v, &ch.Schema)
		case 2:
			return plainString(v, &ch.Table)
		case 3:
			ch.Key = v
		case 4:
			ch.Before = v
		case 5:
			ch.After = v
		case 6:
			return plainStrings(v, &ch.UnchangedToast)
		case 7:
			return decodeSource(v, &ch.Source)
		}
		return true
	})
}

func decodeSource(v []byte, s *Source) bool {
	if isNull(v) {
		return true
	}
	var buf [6]FlatMember
	ms, _, ok := scanObject(v, 0, buf[:], 1)
	return ok && fields(ms, sourceFields, func(f int, v []byte) bool {
		switch f {
		case 0:
			return plainString(v, &s.LSN)
		case 1:
			return plainString(v, &s.CommitLSN)
		case 2:
			return plainUint32(v, &s.XID)
		case 3:
			return plainString(v, &s.CommitTime)
		case 4:
			return plainInt64(v, &s.Seq)
		default:
			return plainBool(v, &s.Snapshot)
		}
	})
}

// DecodeRef decodes a refs topic record's value as json.Unmarshal would
// into a zero Ref.
func DecodeRef(data []byte, r *Ref) error {
	return decodeOr(data, r, decodeRefFast)
}

// decodeRefFast is DecodeRef's fast path.
func decodeRefFast(data []byte, r *Ref) bool {
	*r = Ref{}
	var buf [7]FlatMember
	ms, ok := ScanObject(data, buf[:])
	return ok && fields(ms, refFields, func(f int, v []byte) bool {
		switch f {
		case 0:
			return plainString(v, &r.Aggregate)
		case 1:
			return plainString(v, &r.CommitLSN)
		case 2:
			return plainUint32(v, &r.XID)
		case 3:
			return plainString(v, &r.Table)
		case 4:
			var s string
			ok := plainString(v, &s)
			r.Op = Op(s)
			return ok
		case 5:
			return plainBool(v, &r.Backfill)
		default:
			return plainString(v, &r.Index)
		}
	})
}
