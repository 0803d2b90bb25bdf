package indexer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/decant-cdc/decant/wire"
)

// DocumentID returns the Elasticsearch _id of an aggregate id, given as the
// JSON object of its id columns in id order (the aggregate topic key).
//
// A single-column id gives the value's text: {"id":7} → 7, {"sku":"a-1"} →
// a-1 (the string itself, unquoted). A composite id gives the JSON array of
// its values in column order: {"order_id":7,"line_no":2} → [7,2]. Values are
// copied as PostgreSQL encoded them (compacted), so numbers keep every digit.
func DocumentID(id json.RawMessage) (string, error) {
	vals, err := idValues(id)
	if err != nil {
		return "", err
	}
	if len(vals) == 1 {
		v := vals[0]
		switch v[0] {
		case '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return "", fmt.Errorf("aggregate id %s: %w", id, err)
			}
			if s == "" {
				return "", fmt.Errorf("aggregate id %s: an empty string cannot be an Elasticsearch _id", id)
			}
			return s, nil
		case '{', '[':
			return "", fmt.Errorf("aggregate id %s: a single id value must be a string, number or boolean", id)
		case 'n':
			return "", fmt.Errorf("aggregate id %s: id value is null", id)
		}
		return string(v), nil
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(v)
	}
	b.WriteByte(']')
	return b.String(), nil
}

// idValues returns the compacted member values of a JSON object, in order.
func idValues(id json.RawMessage) ([]json.RawMessage, error) {
	if vals, ok := fastIDValues(id); ok {
		return vals, nil
	}
	return idValuesJSON(id)
}

// idValuesJSON is idValues with encoding/json, for any valid id.
func idValuesJSON(id json.RawMessage) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(id))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("aggregate id %s: want a JSON object of id columns, e.g. {\"id\":7}", id)
	}
	var vals []json.RawMessage
	for dec.More() {
		if _, err := dec.Token(); err != nil { // member name
			return nil, fmt.Errorf("aggregate id %s: %w", id, err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("aggregate id %s: %w", id, err)
		}
		var c bytes.Buffer
		if err := json.Compact(&c, raw); err != nil {
			return nil, fmt.Errorf("aggregate id %s: %w", id, err)
		}
		vals = append(vals, c.Bytes())
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("aggregate id %s: %w", id, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("aggregate id %s: trailing data after the object", id)
	}
	if len(vals) == 0 {
		return nil, errors.New("aggregate id {}: an id needs at least one column")
	}
	return vals, nil
}

// fastIDValues is idValues' fast path for the ids the build stage writes,
// flat objects of scalars (wire.ScanFlatObject): {"id":7},
// {"order_id":3,"sku":"A-1"}. Anything else (ok false) takes the general
// path, which also says why an id is not one.
func fastIDValues(id []byte) ([]json.RawMessage, bool) {
	var buf [4]wire.FlatMember
	ms, ok := wire.ScanFlatObject(id, buf[:])
	if !ok || len(ms) == 0 {
		return nil, false
	}
	vals := make([]json.RawMessage, len(ms))
	for i, m := range ms {
		vals[i] = m.Value
	}
	return vals, true
}
