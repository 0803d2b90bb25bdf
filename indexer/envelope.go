package indexer

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/decant-cdc/decant/wire"
)

// checkDocument reports why d cannot be written to any sink, or nil. A
// document that fails it is dead-lettered rather than retried: no retry can
// fix it.
func checkDocument(d *wire.Document) error {
	if d.Aggregate == "" {
		return fmt.Errorf("document %s has no aggregate name", d.ID)
	}
	if _, err := idValues(d.ID); err != nil {
		return err
	}
	doc := bytes.TrimSpace(d.Doc)
	isNull := len(doc) == 0 || string(doc) == "null"
	if d.Deleted && !isNull {
		return fmt.Errorf("aggregate %s id %s: a deleted document must have doc null", d.Aggregate, d.ID)
	}
	if !d.Deleted && isNull {
		return fmt.Errorf("aggregate %s id %s: doc is null but deleted is false", d.Aggregate, d.ID)
	}
	// PostgreSQL's json builders make valid JSON (wire.Document.Built).
	if !d.Deleted && !d.Built && !json.Valid(d.Doc) {
		return fmt.Errorf("aggregate %s id %s: doc is not valid JSON", d.Aggregate, d.ID)
	}
	return nil
}
