package streamer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/jackc/pglogrepl"
)

// Value encoding: PostgreSQL text form (as pgoutput sends it) → the JSON that
// to_jsonb() gives for the same value. Everything here is pure and appends
// into the caller's buffer; the common kinds (numbers, strings, timestamps)
// allocate nothing.
//
// The text forms are the ones of a session with DateStyle=ISO and the
// default IntervalStyle, bytea_output and extra_float_digits; the
// replication connection sets them. The rules, all checked against PostgreSQL 15 in encode_e2e_test.go:
//
//   - int2/4/8, float4/8, numeric: a number written as numeric_out writes it.
//     to_jsonb passes every number through numeric_in, so a float's exponent
//     is expanded (1e+100 → 1 and 100 zeros, 1.5e-10 → 0.00000000015), -0
//     becomes 0 and numeric keeps its scale (1.50). NaN, Infinity, -Infinity
//     are strings. Types merely numeric-looking (oid, money) are strings.
//   - json is converted to jsonb: keys sorted (shorter first, then bytewise),
//     the last of duplicate keys kept, numbers normalized as above.
//   - date: unchanged. timestamp: 'T' between date and time.
//     timestamptz: also the offset as ±HH:MM[:SS] ("+00" → "+00:00").
//     A BC suffix stays (" BC"); infinity stays a string. time and timetz are
//     plain strings (to_jsonb has no rule for them).
//   - arrays: nested JSON arrays whatever their bounds ("[0:1]={1,2}" →
//     [1,2]), NULL → null, elements by their type. int2vector is an array of
//     numbers, oidvector of strings.
//   - composites: an object whose keys are in jsonb order, fields by type,
//     empty unquoted fields null.
//   - strings are escaped as escape_json does: \" \\ \b \f \n \r \t, other
//     control characters as \u00XX, everything else (/, DEL, non-ASCII) as is.
//     Invalid UTF-8, which a UTF8 database never sends, becomes \ufffd.

// encMaxDepth bounds the nesting of arrays, composites and JSON so that a
// hostile value cannot exhaust the stack.
const encMaxDepth = 1000

var errEncDepth = errors.New("nested too deeply")

// encodeValue appends the JSON encoding of one non-NULL text-format value of
// type oid to dst. Unknown OIDs (not in t) encode as a JSON string of the
// text. The only error is malformed text of a structured type (array,
// composite, json); dst is then returned unchanged and the caller should
// encode the text as a string instead. It is pure and safe for concurrent use.
func (t *pgTypes) encodeValue(dst []byte, oid uint32, text []byte) ([]byte, error) {
	n := len(dst)
	out, err := encValue(dst, t.snapshot(), oid, text, 0)
	if err != nil {
		return dst[:n], err
	}
	return out, nil
}

// relColumn is one column of a relation as pgoutput describes it.
type relColumn struct {
	Name    string
	TypeOID uint32
}

// encodeTuple appends a pgoutput tuple as a JSON object with one member per
// column, in column order: NULL ('n') as null, text ('t') by encodeValue
// (falling back to a string for malformed text, so a row is never lost to
// an encoding quirk). Unchanged TOASTed values ('u') are left out of the
// object and their names returned in unchanged. A binary value ('b', which
// decant never requests) or a tuple whose width differs from cols is an
// error, and dst is then returned unchanged. A nil tuple encodes as null.
func (t *pgTypes) encodeTuple(dst []byte, cols []relColumn, tuple *pglogrepl.TupleData) (out []byte, unchanged []string, err error) {
	if tuple == nil {
		return append(dst, "null"...), nil, nil
	}
	if len(tuple.Columns) != len(cols) {
		return dst, nil, fmt.Errorf("tuple has %d columns, relation has %d", len(tuple.Columns), len(cols))
	}
	m := t.snapshot()
	n := len(dst)
	dst = append(dst, '{')
	first := true
	for i, c := range tuple.Columns {
		col := &cols[i]
		switch c.DataType {
		case pglogrepl.TupleDataTypeToast:
			unchanged = append(unchanged, col.Name)
			continue
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeText:
		default:
			return dst[:n], nil, fmt.Errorf("column %q: unsupported tuple data type %q", col.Name, c.DataType)
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = encString(dst, encBytes(col.Name))
		dst = append(dst, ':')
		if c.DataType == pglogrepl.TupleDataTypeNull {
			dst = append(dst, "null"...)
			continue
		}
		k := len(dst)
		var err error
		if dst, err = encValue(dst, m, col.TypeOID, c.Data, 0); err != nil {
			dst = encString(dst[:k], c.Data)
		}
	}
	return append(dst, '}'), unchanged, nil
}

// encBytes views s as bytes without copying; the result must not be modified.
func encBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

func encValue(dst []byte, m *encTypeMap, oid uint32, s []byte, depth int) ([]byte, error) {
	ti := m.get(oid)
	if ti == nil {
		return encString(dst, s), nil
	}
	return encTyped(dst, m, ti, s, depth)
}

func encTyped(dst []byte, m *encTypeMap, ti *pgType, s []byte, depth int) ([]byte, error) {
	switch ti.Kind {
	case kindNumber:
		return encNumber(dst, s), nil
	case kindBool:
		if len(s) == 1 {
			switch s[0] {
			case 't':
				return append(dst, "true"...), nil
			case 'f':
				return append(dst, "false"...), nil
			}
		}
		return encString(dst, s), nil
	case kindTimestamp:
		return encTimestamp(dst, s, false), nil
	case kindTimestampTZ:
		return encTimestamp(dst, s, true), nil
	case kindJSON, kindJSONB:
		if depth > encMaxDepth {
			return dst, errEncDepth
		}
		p := encJSONParser{s: s, sortKeys: ti.Kind == kindJSON, depth: depth}
		return p.parse(dst)
	case kindArray:
		return encArray(dst, m, ti, s, depth+1)
	case kindComposite:
		return encComposite(dst, m, ti, s, depth+1)
	case kindVector:
		return encVector(dst, m, ti, s, depth+1)
	case kindHstore:
		return encHstore(dst, s)
	default: // KindString, KindDate, KindJSONCast
		return encString(dst, s), nil
	}
}

// encSafe marks the bytes escape_json copies as they are (ASCII only; bytes
// from 0x80 are checked as UTF-8).
var encSafe = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

const encHex = "0123456789abcdef"

// encEscape is the letter of the two-character escape (\n, \" …) of the
// bytes escape_json writes so; the other control characters become \u00XX.
var encEscape = [256]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// encSafePrefix returns the length of the longest prefix of s that
// escape_json copies as it is and that is ASCII, eight bytes at a time.
func encSafePrefix(s []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		q := x ^ (lo * '"')
		b := x ^ (lo * '\\')
		// High bit of a byte set if it is ≥ 0x80, < 0x20, '"' or '\\'
		// (borrows can only flag bytes after a flagged one).
		if (x|(x-lo*0x20)&^x|(q-lo)&^q|(b-lo)&^b)&hi != 0 {
			break
		}
	}
	for i < len(s) && encSafe[s[i]] {
		i++
	}
	return i
}

// encString appends s as a JSON string escaped like escape_json.
func encString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; ; {
		i += encSafePrefix(s[i:])
		if i >= len(s) {
			break
		}
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s[i:])
			if r != utf8.RuneError || size > 1 {
				i += size
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		dst = append(dst, s[start:i]...)
		if e := encEscape[c]; e != 0 {
			dst = append(dst, '\\', e)
		} else {
			dst = append(dst, '\\', 'u', '0', '0', encHex[c>>4], encHex[c&0xf])
		}
		i++
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func encIsDigit(c byte) bool { return '0' <= c && c <= '9' }

// encNumber appends a number's text form as to_jsonb writes it: text that is
// not a JSON number (NaN, Infinity, -Infinity) as a string, the others as
// numeric_out would write numeric_in's reading of them.
func encNumber(dst, s []byte) []byte {
	if out, ok := encNumeric(dst, s); ok {
		return out
	}
	return encString(dst, s)
}

// encNumeric appends the JSON number s (JSON syntax) normalized like
// numeric_in + numeric_out: exponent expanded, scale kept, no negative zero.
// It reports false, appending nothing, if s is not a JSON number or is out
// of numeric's range.
func encNumeric(dst, s []byte) ([]byte, bool) {
	i := 0
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		i++
	}
	intStart := i
	for i < len(s) && encIsDigit(s[i]) {
		i++
	}
	intEnd := i
	if intEnd == intStart || (s[intStart] == '0' && intEnd-intStart > 1) {
		return dst, false
	}
	fracStart, fracEnd := i, i
	if i < len(s) && s[i] == '.' {
		i++
		fracStart = i
		for i < len(s) && encIsDigit(s[i]) {
			i++
		}
		fracEnd = i
		if fracEnd == fracStart {
			return dst, false
		}
	}
	hasExp, exp := false, 0
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		hasExp = true
		i++
		expNeg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			expNeg = s[i] == '-'
			i++
		}
		expStart := i
		for i < len(s) && encIsDigit(s[i]) {
			if exp < 1e7 {
				exp = exp*10 + int(s[i]-'0')
			}
			i++
		}
		if i == expStart {
			return dst, false
		}
		if expNeg {
			exp = -exp
		}
	}
	if i != len(s) {
		return dst, false
	}
	zero := true
	for _, c := range s[intStart:fracEnd] {
		if c != '0' && c != '.' {
			zero = false
			break
		}
	}
	if !hasExp && !(neg && zero) {
		return append(dst, s...), true // already as numeric_out writes it
	}

	// digits = int ++ frac; the decimal point falls after digit p.
	ints, fracs := s[intStart:intEnd], s[fracStart:fracEnd]
	nd := len(ints) + len(fracs)
	digit := func(k int) byte {
		switch {
		case k < 0 || k >= nd:
			return '0'
		case k < len(ints):
			return ints[k]
		default:
			return fracs[k-len(ints)]
		}
	}
	p := len(ints) + exp
	scale := max(len(fracs)-exp, 0)
	// numeric's limits: 131072 digits before the point, 16383 after.
	if p > 131072 || scale > 16383 {
		return dst, false
	}
	if neg && !zero {
		dst = append(dst, '-')
	}
	k := 0
	for k < p-1 && digit(k) == '0' { // strip leading zeros, keep one
		k++
	}
	if p <= 0 {
		dst = append(dst, '0')
	}
	for ; k < p; k++ {
		dst = append(dst, digit(k))
	}
	if scale > 0 {
		dst = append(dst, '.')
		for j := range scale {
			dst = append(dst, digit(p+j))
		}
	}
	return dst, true
}

// encTimestamp appends an ISO timestamp[tz] as to_jsonb writes it (XSD
// style): 'T' instead of the space after the date, and with tz the offset
// as ±HH:MM or ±HH:MM:SS. Text it does not recognize (infinity, -infinity)
// is written as a string.
func encTimestamp(dst, s []byte, tz bool) []byte {
	sp := bytes.IndexByte(s, ' ')
	if sp < 0 || encSafePrefix(s) != len(s) {
		return encString(dst, s)
	}
	dst = append(dst, '"')
	dst = append(dst, s[:sp]...)
	dst = append(dst, 'T')
	rest := s[sp+1:]
	if tz {
		for j, c := range rest {
			if c != '+' && c != '-' {
				continue
			}
			k := j + 1
			for k < len(rest) && (encIsDigit(rest[k]) || rest[k] == ':') {
				k++
			}
			dst = append(dst, rest[:k]...)
			if k-j == 3 { // ±HH
				dst = append(dst, ":00"...)
			}
			rest = rest[k:]
			break
		}
	}
	dst = append(dst, rest...)
	return append(dst, '"')
}

// encIsSpace is array_in's and record_in's idea of white space.
func encIsSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func encSkipSpace(s []byte, i int) int {
	for i < len(s) && encIsSpace(s[i]) {
		i++
	}
	return i
}

func encSyntax(what string, s []byte, i int) error {
	return fmt.Errorf("malformed %s literal at byte %d of %q", what, i, encTruncate(s))
}

func encTruncate(s []byte) string {
	if len(s) > 64 {
		return string(s[:64]) + "…"
	}
	return string(s)
}

// encArrayParser reads an array_out literal (array_in's grammar):
// "[lb:ub]...=" bounds (dropped, as to_jsonb drops them), then braces with
// elements separated by the element type's delimiter; quoted elements use
// backslash escapes; an unquoted NULL is null.
type encArrayParser struct {
	m       *encTypeMap
	elem    *pgType // nil: strings
	delim   byte
	depth   int
	s       []byte
	scratch []byte // unescaped element
}

// unescape returns val without its backslash escapes, in p.scratch.
func (p *encArrayParser) unescape(val []byte) []byte {
	p.scratch = p.scratch[:0]
	for k := 0; k < len(val); k++ {
		if val[k] == '\\' {
			k++
		}
		p.scratch = append(p.scratch, val[k])
	}
	return p.scratch
}

func encArray(dst []byte, m *encTypeMap, ti *pgType, s []byte, depth int) ([]byte, error) {
	if depth > encMaxDepth {
		return dst, errEncDepth
	}
	p := encArrayParser{m: m, elem: m.get(ti.Elem), delim: ti.Delim, depth: depth, s: s}
	if p.delim == 0 {
		p.delim = ','
	}
	i := encSkipSpace(s, 0)
	if i < len(s) && s[i] == '[' {
		for i < len(s) && s[i] != '=' {
			if c := s[i]; !encIsDigit(c) && c != '[' && c != ']' && c != ':' && c != '-' && c != '+' && !encIsSpace(c) {
				return dst, encSyntax("array", s, i)
			}
			i++
		}
		if i == len(s) {
			return dst, encSyntax("array", s, i)
		}
		i = encSkipSpace(s, i+1)
	}
	dst, i, err := p.level(dst, i, 0)
	if err != nil {
		return dst, err
	}
	if i = encSkipSpace(s, i); i != len(s) {
		return dst, encSyntax("array", s, i)
	}
	return dst, nil
}

// level reads one brace level starting at s[i] == '{'.
func (p *encArrayParser) level(dst []byte, i, nest int) ([]byte, int, error) {
	s := p.s
	if i >= len(s) || s[i] != '{' {
		return dst, i, encSyntax("array", s, i)
	}
	if p.depth+nest > encMaxDepth {
		return dst, i, errEncDepth
	}
	dst = append(dst, '[')
	i = encSkipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return append(dst, ']'), i + 1, nil
	}
	sub := 0 // 1: this level holds sub-arrays, 2: elements
	for n := 0; ; n++ {
		if n > 0 {
			dst = append(dst, ',')
		}
		i = encSkipSpace(s, i)
		if i >= len(s) {
			return dst, i, encSyntax("array", s, i)
		}
		var err error
		if s[i] == '{' {
			if sub == 2 {
				return dst, i, encSyntax("array", s, i)
			}
			sub = 1
			dst, i, err = p.level(dst, i, nest+1)
		} else {
			if sub == 1 {
				return dst, i, encSyntax("array", s, i)
			}
			sub = 2
			dst, i, err = p.element(dst, i)
		}
		if err != nil {
			return dst, i, err
		}
		i = encSkipSpace(s, i)
		if i >= len(s) {
			return dst, i, encSyntax("array", s, i)
		}
		switch s[i] {
		case p.delim:
			i++
		case '}':
			return append(dst, ']'), i + 1, nil
		default:
			return dst, i, encSyntax("array", s, i)
		}
	}
}

// element reads one element starting at s[i] (not white space, not '{').
func (p *encArrayParser) element(dst []byte, i int) ([]byte, int, error) {
	s := p.s
	var val []byte
	if s[i] == '"' {
		i++
		start, esc := i, false
		for i < len(s) && s[i] != '"' {
			if s[i] == '\\' {
				esc = true
				i++
			}
			i++
		}
		if i >= len(s) {
			return dst, i, encSyntax("array", s, i)
		}
		val = s[start:i]
		i++
		if esc {
			val = p.unescape(val)
		}
	} else {
		start, esc, keep := i, false, i // keep: end of the last escaped byte
		for i < len(s) && s[i] != p.delim && s[i] != '}' {
			switch s[i] {
			case '{', '"':
				return dst, i, encSyntax("array", s, i)
			case '\\':
				if i+1 >= len(s) {
					return dst, i, encSyntax("array", s, i)
				}
				esc = true
				i++
				keep = i + 1
			}
			i++
		}
		end := i
		for end > keep && encIsSpace(s[end-1]) {
			end--
		}
		val = s[start:end]
		if len(val) == 0 {
			return dst, i, encSyntax("array", s, i)
		}
		if esc {
			val = p.unescape(val)
		} else if len(val) == 4 && (val[0]|0x20) == 'n' && (val[1]|0x20) == 'u' && (val[2]|0x20) == 'l' && (val[3]|0x20) == 'l' {
			return append(dst, "null"...), i, nil
		}
	}
	if p.elem == nil {
		return encString(dst, val), i, nil
	}
	dst, err := encTyped(dst, p.m, p.elem, val, p.depth)
	return dst, i, err
}

// encField is a parsed composite field: null, or scratch[start:end].
type encField struct {
	null       bool
	start, end int
}

// encComposite reads a record_out literal (record_in's grammar): fields
// between parentheses separated by commas; an empty unquoted field is null;
// inside a field, "..." quotes (with "" for a quote) and backslash escapes.
func encComposite(dst []byte, m *encTypeMap, ti *pgType, s []byte, depth int) ([]byte, error) {
	if depth > encMaxDepth {
		return dst, errEncDepth
	}
	var stack [16]encField
	fields := stack[:0]
	var scratch []byte
	i := encSkipSpace(s, 0)
	if i >= len(s) || s[i] != '(' {
		return dst, encSyntax("record", s, i)
	}
	i++
	for f := range ti.Fields {
		if f > 0 {
			if i >= len(s) || s[i] != ',' {
				return dst, encSyntax("record", s, i)
			}
			i++
		}
		if i >= len(s) {
			return dst, encSyntax("record", s, i)
		}
		if s[i] == ',' || s[i] == ')' {
			fields = append(fields, encField{null: true})
			continue
		}
		start := len(scratch)
		inQuote := false
		for inQuote || (s[i] != ',' && s[i] != ')') {
			c := s[i]
			i++
			switch {
			case c == '\\':
				if i >= len(s) {
					return dst, encSyntax("record", s, i)
				}
				scratch = append(scratch, s[i])
				i++
			case c == '"' && !inQuote:
				inQuote = true
			case c == '"' && i < len(s) && s[i] == '"':
				scratch = append(scratch, '"')
				i++
			case c == '"':
				inQuote = false
			default:
				scratch = append(scratch, c)
			}
			if i >= len(s) {
				return dst, encSyntax("record", s, i)
			}
		}
		fields = append(fields, encField{start: start, end: len(scratch)})
	}
	if i >= len(s) || s[i] != ')' {
		return dst, encSyntax("record", s, i)
	}
	if i = encSkipSpace(s, i+1); i != len(s) {
		return dst, encSyntax("record", s, i)
	}

	dst = append(dst, '{')
	for n, k := range ti.keys {
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, k.json...)
		f := fields[k.field]
		if f.null {
			dst = append(dst, "null"...)
			continue
		}
		var err error
		if dst, err = encValue(dst, m, ti.Fields[k.field].OID, scratch[f.start:f.end], depth); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// encVector reads int2vector_out / oidvector_out: elements separated by
// spaces.
func encVector(dst []byte, m *encTypeMap, ti *pgType, s []byte, depth int) ([]byte, error) {
	dst = append(dst, '[')
	n := 0
	for i := 0; i < len(s); {
		if encIsSpace(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && !encIsSpace(s[j]) {
			j++
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		var err error
		if dst, err = encValue(dst, m, ti.Elem, s[i:j], depth); err != nil {
			return dst, err
		}
		i = j
	}
	return append(dst, ']'), nil
}

// encHstore reads hstore_out's text ("k"=>"v", "n"=>NULL; quoted with
// backslash escapes, unquoted words allowed as hstore_in allows them) and
// writes the object hstore_to_json gives: every value a string or null.
// hstore_out already sorts keys as jsonb does.
func encHstore(dst, s []byte) ([]byte, error) {
	var scratch []byte
	// word reads a quoted or unquoted word at s[i]; null reports an
	// unquoted NULL.
	word := func(i int) (w []byte, null bool, next int, err error) {
		scratch = scratch[:0]
		if i < len(s) && s[i] == '"' {
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					if i++; i == len(s) {
						break
					}
				}
				scratch = append(scratch, s[i])
			}
			if i >= len(s) {
				return nil, false, i, encSyntax("hstore", s, i)
			}
			return scratch, false, i + 1, nil
		}
		start := i
		for ; i < len(s) && !encIsSpace(s[i]) && s[i] != '=' && s[i] != ',' && s[i] != '"'; i++ {
			if s[i] == '\\' {
				if i++; i == len(s) {
					return nil, false, i, encSyntax("hstore", s, i)
				}
			}
			scratch = append(scratch, s[i])
		}
		if i == start {
			return nil, false, i, encSyntax("hstore", s, i)
		}
		raw := s[start:i]
		null = len(raw) == 4 && (raw[0]|0x20) == 'n' && (raw[1]|0x20) == 'u' && (raw[2]|0x20) == 'l' && (raw[3]|0x20) == 'l'
		return scratch, null, i, nil
	}
	dst = append(dst, '{')
	i := encSkipSpace(s, 0)
	for n := 0; i < len(s); n++ {
		if n > 0 {
			if s[i] != ',' {
				return dst, encSyntax("hstore", s, i)
			}
			i = encSkipSpace(s, i+1)
			dst = append(dst, ',')
		}
		k, _, j, err := word(i)
		if err != nil {
			return dst, err
		}
		dst = encString(dst, k)
		dst = append(dst, ':')
		if i = encSkipSpace(s, j); i+1 >= len(s) || s[i] != '=' || s[i+1] != '>' {
			return dst, encSyntax("hstore", s, i)
		}
		v, null, j, err := word(encSkipSpace(s, i+2))
		if err != nil {
			return dst, err
		}
		if null {
			dst = append(dst, "null"...)
		} else {
			dst = encString(dst, v)
		}
		i = encSkipSpace(s, j)
	}
	return append(dst, '}'), nil
}

// encJSONParser re-encodes a json or jsonb text as to_jsonb writes it:
// compact, strings escaped like escape_json, numbers as numeric, and for
// json (sortKeys) object keys in jsonb order with the last duplicate kept.
// jsonb text is already in that order.
type encJSONParser struct {
	s        []byte
	i        int
	sortKeys bool
	depth    int
	keys     []byte      // sortKeys: decoded keys of the open objects
	members  []encMember // sortKeys: members of the open objects
	tmp      []byte      // reordering buffer, and decoded strings
}

type encMember struct {
	key        [2]int // in keys
	start, end int    // of `"key":value` in dst
}

func (p *encJSONParser) parse(dst []byte) ([]byte, error) {
	dst, err := p.value(dst)
	if err != nil {
		return dst, err
	}
	if p.skipSpace(); p.i != len(p.s) {
		return dst, encSyntax("json", p.s, p.i)
	}
	return dst, nil
}

func (p *encJSONParser) skipSpace() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *encJSONParser) value(dst []byte) ([]byte, error) {
	p.skipSpace()
	if p.i >= len(p.s) {
		return dst, encSyntax("json", p.s, p.i)
	}
	switch c := p.s[p.i]; {
	case c == '{':
		return p.object(dst)
	case c == '[':
		return p.array(dst)
	case c == '"':
		return p.string(dst)
	case c == '-' || encIsDigit(c):
		j := p.i + 1
		for j < len(p.s) && (encIsDigit(p.s[j]) || p.s[j] == '.' || p.s[j] == 'e' || p.s[j] == 'E' || p.s[j] == '+' || p.s[j] == '-') {
			j++
		}
		out, ok := encNumeric(dst, p.s[p.i:j])
		if !ok {
			return dst, encSyntax("json", p.s, p.i)
		}
		p.i = j
		return out, nil
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(p.s)-p.i >= len(lit) && string(p.s[p.i:p.i+len(lit)]) == lit {
				p.i += len(lit)
				return append(dst, lit...), nil
			}
		}
		return dst, encSyntax("json", p.s, p.i)
	}
}

func (p *encJSONParser) enter() error {
	if p.depth++; p.depth > encMaxDepth {
		return errEncDepth
	}
	return nil
}

// open enters the array or object that starts at p.i: it appends the
// opening byte and reports whether the value is empty, its closing byte
// close read and appended too. The caller leaves (defer p.leave()) even
// when open fails.
func (p *encJSONParser) open(dst []byte, close byte) ([]byte, bool, error) {
	if err := p.enter(); err != nil {
		return dst, false, err
	}
	dst = append(dst, p.s[p.i])
	p.i++
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == close {
		p.i++
		return append(dst, close), true, nil
	}
	return dst, false, nil
}

func (p *encJSONParser) leave() { p.depth-- }

// next reads what follows an element or a member: a comma, appended, when
// more follow; else the closing byte close, not appended.
func (p *encJSONParser) next(dst []byte, close byte) ([]byte, bool, error) {
	p.skipSpace()
	if p.i < len(p.s) {
		switch p.s[p.i] {
		case ',':
			p.i++
			return append(dst, ','), true, nil
		case close:
			p.i++
			return dst, false, nil
		}
	}
	return dst, false, encSyntax("json", p.s, p.i)
}

func (p *encJSONParser) array(dst []byte) ([]byte, error) {
	dst, empty, err := p.open(dst, ']')
	defer p.leave()
	if err != nil || empty {
		return dst, err
	}
	for more := true; more; {
		if dst, err = p.value(dst); err != nil {
			return dst, err
		}
		if dst, more, err = p.next(dst, ']'); err != nil {
			return dst, err
		}
	}
	return append(dst, ']'), nil
}

func (p *encJSONParser) object(dst []byte) ([]byte, error) {
	dst, empty, err := p.open(dst, '}')
	defer p.leave()
	if err != nil || empty {
		return dst, err
	}
	body := len(dst)
	base, keysBase := len(p.members), len(p.keys)
	for more := true; more; {
		p.skipSpace()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return dst, encSyntax("json", p.s, p.i)
		}
		start := len(dst)
		if p.sortKeys {
			k := len(p.keys)
			if p.keys, err = p.decodeString(p.keys); err != nil {
				return dst, err
			}
			dst = encString(dst, p.keys[k:])
			p.members = append(p.members, encMember{key: [2]int{k, len(p.keys)}})
		} else if dst, err = p.string(dst); err != nil {
			return dst, err
		}
		p.skipSpace()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return dst, encSyntax("json", p.s, p.i)
		}
		p.i++
		dst = append(dst, ':')
		if dst, err = p.value(dst); err != nil {
			return dst, err
		}
		if p.sortKeys {
			// Nested objects have truncated members back to their own base,
			// so this member is still the last one.
			mb := &p.members[len(p.members)-1]
			mb.start, mb.end = start, len(dst)
		}
		if dst, more, err = p.next(dst, '}'); err != nil {
			return dst, err
		}
	}
	if p.sortKeys {
		dst = p.reorder(dst, body, p.members[base:])
		p.members, p.keys = p.members[:base], p.keys[:keysBase]
	}
	return append(dst, '}'), nil
}

// reorder rewrites dst[body:] (the members ms, comma separated) in jsonb key
// order, keeping only the last member of each key.
func (p *encJSONParser) reorder(dst []byte, body int, ms []encMember) []byte {
	key := func(m encMember) []byte { return p.keys[m.key[0]:m.key[1]] }
	compare := func(a, b encMember) int {
		ka, kb := key(a), key(b)
		if len(ka) != len(kb) {
			return len(ka) - len(kb)
		}
		return slices.Compare(ka, kb)
	}
	sorted := true
	for j := 1; j < len(ms); j++ {
		if compare(ms[j-1], ms[j]) >= 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return dst
	}
	slices.SortStableFunc(ms, compare)
	p.tmp = p.tmp[:0]
	for j, m := range ms {
		if j+1 < len(ms) && compare(m, ms[j+1]) == 0 {
			continue // a later duplicate wins
		}
		if len(p.tmp) > 0 {
			p.tmp = append(p.tmp, ',')
		}
		p.tmp = append(p.tmp, dst[m.start:m.end]...)
	}
	return append(dst[:body], p.tmp...)
}

// string re-encodes the JSON string at p.i.
func (p *encJSONParser) string(dst []byte) ([]byte, error) {
	s, i := p.s, p.i+1
	j := i
	for j < len(s) && s[j] != '"' && s[j] != '\\' && s[j] >= 0x20 {
		j++
	}
	if j < len(s) && s[j] == '"' { // no escapes: nothing to decode
		p.i = j + 1
		return encString(dst, s[i:j]), nil
	}
	var err error
	p.tmp, err = p.decodeString(p.tmp[:0])
	if err != nil {
		return dst, err
	}
	return encString(dst, p.tmp), nil
}

// decodeString appends the value of the JSON string at p.i to buf.
func (p *encJSONParser) decodeString(buf []byte) ([]byte, error) {
	s := p.s
	i := p.i + 1
	for {
		start := i
		for i < len(s) && s[i] != '"' && s[i] != '\\' && s[i] >= 0x20 {
			i++
		}
		buf = append(buf, s[start:i]...)
		if i >= len(s) || s[i] < 0x20 {
			return buf, encSyntax("json", s, i)
		}
		if s[i] == '"' {
			p.i = i + 1
			return buf, nil
		}
		// backslash
		if i+1 >= len(s) {
			return buf, encSyntax("json", s, i)
		}
		c := s[i+1]
		i += 2
		switch c {
		case '"', '\\', '/':
			buf = append(buf, c)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := encHex4(s, i)
			if !ok {
				return buf, encSyntax("json", s, i)
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(-1), false
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					r2, ok = encHex4(s, i+2)
				}
				if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return buf, encSyntax("json", s, i-1)
		}
	}
}

func encHex4(s []byte, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case encIsDigit(c):
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
