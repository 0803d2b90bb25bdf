package resolver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// ParseID turns the command-line form of an aggregate id into its key: a
// JSON object naming every id column ({"id":7}, {"order_id":7,"line_no":2})
// or, for a single-column id, a bare value (7, "abc" or abc).
func ParseID(a *mappings.Aggregate, arg string) ([]byte, error) {
	s := bytes.TrimSpace([]byte(arg))
	if len(s) > 0 && s[0] == '{' {
		if _, err := parseKey(a, s); err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		_ = json.Unmarshal(s, &m)
		vals := make([]json.RawMessage, len(a.ID))
		for i, c := range a.ID {
			var buf bytes.Buffer
			if err := json.Compact(&buf, m[c]); err != nil {
				return nil, err
			}
			vals[i] = buf.Bytes()
		}
		return idKey(a, vals), nil
	}
	if len(a.ID) != 1 {
		return nil, fmt.Errorf("aggregate %s has a composite id (%v): give it as a JSON object, e.g. '{%q:…}'", a.Name, a.ID, a.ID[0])
	}
	var v json.RawMessage
	if json.Valid(s) && len(s) > 0 && s[0] != '[' {
		var buf bytes.Buffer
		_ = json.Compact(&buf, s)
		v = buf.Bytes()
	} else {
		v, _ = json.Marshal(string(s))
	}
	return idKey(a, []json.RawMessage{v}), nil
}

// Preview builds the document of one id exactly as the build stage does
// (same statement, same version rule) without writing it anywhere. A
// missing id gives a Deleted document.
func Preview(ctx context.Context, db *pgxpool.Pool, a *mappings.Aggregate, key []byte) (wire.Document, error) {
	docs, err := build(ctx, db, a, [][]byte{key}, nil, 0, slog.Default())
	if err != nil {
		return wire.Document{}, err
	}
	if len(docs) == 0 {
		_, err := parseKey(a, key)
		return wire.Document{}, err
	}
	return docs[0], nil
}
