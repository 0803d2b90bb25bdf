package wire

import (
	"bytes"
	"encoding/json"
)

// Record keys and aggregate ids are flat JSON objects that decant writes
// itself ({"id":7}, {"order_id":3,"sku":"a-1"}). The build stage parses
// every ref's key two or three times, and the search sink every
// document's id: with encoding/json that was a sixth of decant's CPU in a
// Kafka-sink-only backfill (docs/performance.md, "Ninth pass").
// ScanFlatObject reads the common form without reflection; anything it
// does not fully understand is left to the caller's encoding/json path,
// so both give the same answers (resolver FuzzKeyFastPath, indexer
// TestSimpleIDMatchesJSON).

// FlatMember is one member of a flat object: its name, and its value as
// it appears in the object.
type FlatMember struct {
	Name  []byte
	Value json.RawMessage
}

// ScanFlatObject parses key when it is an object whose member names are
// plain ASCII (no escapes), distinct, and whose values are numbers,
// plain ASCII strings (no escapes), true, false or null, with JSON
// whitespace anywhere between tokens. ok is false for anything else,
// valid JSON or not: the caller then decodes key with encoding/json.
func ScanFlatObject(key []byte, buf []FlatMember) (ms []FlatMember, ok bool) {
	ms = buf[:0]
	i := skipJSONSpace(key, 0)
	if i == len(key) || key[i] != '{' {
		return nil, false
	}
	i = skipJSONSpace(key, i+1)
	if i < len(key) && key[i] == '}' {
		return ms, skipJSONSpace(key, i+1) == len(key)
	}
	for {
		name, next, ok := scanPlainString(key, i)
		if !ok {
			return nil, false
		}
		i = skipJSONSpace(key, next)
		if i == len(key) || key[i] != ':' {
			return nil, false
		}
		i = skipJSONSpace(key, i+1)
		end, ok := scanFlatValue(key, i)
		if !ok {
			return nil, false
		}
		for _, m := range ms {
			if bytes.Equal(m.Name, name) {
				return nil, false // a repeated name: encoding/json keeps the last
			}
		}
		ms = append(ms, FlatMember{Name: name, Value: key[i:end]})
		i = skipJSONSpace(key, end)
		if i == len(key) {
			return nil, false
		}
		switch key[i] {
		case ',':
			i = skipJSONSpace(key, i+1)
		case '}':
			return ms, skipJSONSpace(key, i+1) == len(key)
		default:
			return nil, false
		}
	}
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanPlainString reads a string at b[i] of printable ASCII without
// backslashes, returning its content and the index after its quote.
func scanPlainString(b []byte, i int) (content []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// scanFlatValue returns the end of the scalar value at b[i].
func scanFlatValue(b []byte, i int) (end int, ok bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		_, next, ok := scanPlainString(b, i)
		return next, ok
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if bytes.HasPrefix(b[i:], []byte(lit)) {
			return i + len(lit), true
		}
	}
	return 0, false
}

// scanNumber reads a number of JSON's grammar at b[i]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// The byte after it must end the value (the caller checks what follows).
func scanNumber(b []byte, i int) (end int, ok bool) {
	digits := func(j int) int {
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i + 1)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

// PlainScalar returns the text of the JSON scalar v when it needs no
// decoding: a string of printable ASCII without escapes gives its
// content, a number its literal, true and false themselves, and null
// reports null. ok is false for anything else (escapes, other UTF-8,
// arrays, objects, invalid JSON), which encoding/json must decide.
func PlainScalar(v []byte) (text []byte, null, ok bool) {
	if isNull(v) {
		return nil, true, true
	}
	end, ok := scanFlatValue(v, 0)
	if !ok || end != len(v) {
		return nil, false, false
	}
	if v[0] == '"' {
		return v[1 : len(v)-1], false, true
	}
	return v, false, true
}
