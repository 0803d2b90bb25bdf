package streamer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/decant-cdc/decant/config"
)

// redactor keeps columns of one table out of its raw topic (PII): it
// rewrites the before and after objects of every event, snapshot rows
// included. Excluded columns are left out; masked ones hold MaskText;
// hashed ones "sha256:" and the hex SHA-256 of the salt followed by the
// value's JSON, so equal values stay equal (joins, change detection) and
// cannot be read back without the salt. A null stays null.
type redactor struct {
	action map[string]byte // column → 'x' exclude, 'm' mask, 'h' hash
	mask   []byte          // the JSON string of the mask text
	salt   []byte
}

// newRedactors builds the redactors of cfg ("schema.table" → rules).
func newRedactors(rules map[string]config.Redaction, maskText, salt string) map[string]*redactor {
	if len(rules) == 0 {
		return nil
	}
	mask, _ := json.Marshal(maskText)
	out := make(map[string]*redactor, len(rules))
	for table, r := range rules {
		rd := &redactor{action: map[string]byte{}, mask: mask, salt: []byte(salt)}
		for _, c := range r.Exclude {
			rd.action[c] = 'x'
		}
		for _, c := range r.Mask {
			rd.action[c] = 'm'
		}
		for _, c := range r.Hash {
			rd.action[c] = 'h'
		}
		out[table] = rd
	}
	return out
}

// apply rewrites a row object ({"col":value,…}, or null). It returns obj
// itself when nothing in it is redacted, and an error when obj is not a
// JSON object (the event must then not be written as it is).
func (rd *redactor) apply(obj []byte) ([]byte, error) {
	if rd == nil || len(obj) == 0 || bytes.Equal(obj, []byte("null")) {
		return obj, nil
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("redact: a row is not a JSON object")
	}
	out := make([]byte, 0, len(obj))
	out = append(out, '{')
	changed := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("redact: %w", err)
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("redact: column %q: %w", name, err)
		}
		act := rd.action[name]
		if act == 'x' {
			changed = true
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = appendJSONString(out, []byte(name))
		out = append(out, ':')
		switch {
		case act == 0 || bytes.Equal(v, []byte("null")):
			out = append(out, v...)
		case act == 'm':
			changed = true
			out = append(out, rd.mask...)
		case act == 'h':
			changed = true
			h := sha256.New()
			h.Write(rd.salt)
			h.Write(v)
			out = append(out, `"sha256:`...)
			out = hex.AppendEncode(out, h.Sum(nil))
			out = append(out, '"')
		}
	}
	if _, err := dec.Token(); err != nil && err != io.EOF {
		return nil, fmt.Errorf("redact: %w", err)
	}
	if !changed {
		return obj, nil
	}
	return append(out, '}'), nil
}

// names drops excluded columns from a list of column names
// (unchanged_toast).
func (rd *redactor) names(cols []string) []string {
	if rd == nil || len(cols) == 0 {
		return cols
	}
	var out []string
	for _, c := range cols {
		if rd.action[c] != 'x' {
			out = append(out, c)
		}
	}
	return out
}
