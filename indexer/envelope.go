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
	isNull := len(bytes.TrimSpace(d.Doc)) == 0 || bytes.Equal(bytes.TrimSpace(d.Doc), []byte("null"))
	if d.Deleted && !isNull {
		return fmt.Errorf("aggregate %s id %s: a deleted document must have doc null", d.Aggregate, d.ID)
	}
	if !d.Deleted && isNull {
		return fmt.Errorf("aggregate %s id %s: doc is null but deleted is false", d.Aggregate, d.ID)
	}
	if !d.Deleted && !json.Valid(d.Doc) {
		return fmt.Errorf("aggregate %s id %s: doc is not valid JSON", d.Aggregate, d.ID)
	}
	return nil
}

// encodeEnvelope returns the aggregate topic value of d (PRODUCT.md §5):
// {"aggregate","id","version","lsn","deleted","doc"}, compact, in that order.
// A deleted document has doc null.
func encodeEnvelope(d *wire.Document) ([]byte, error) {
	e := *d
	if e.LSN == "" {
		e.LSN = wire.FormatLSN(e.Version)
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

// deadLetter is the value of a <prefix>.dlq record written by the indexer.
// The record's key is the aggregate id, like the aggregate topic's.
type deadLetter struct {
	Stage     string          `json:"stage"` // always "index"
	Sink      string          `json:"sink"`  // "elasticsearch" or "kafka"
	Aggregate string          `json:"aggregate"`
	ID        json.RawMessage `json:"id"`
	Version   uint64          `json:"version"`
	Index     string          `json:"index,omitempty"` // Elasticsearch index or alias that refused it
	Topic     string          `json:"topic,omitempty"` // Kafka topic that refused it
	Status    int             `json:"status,omitempty"`
	Reason    string          `json:"reason"`
}

func (l *deadLetter) encode() []byte {
	if !json.Valid(l.ID) {
		q, _ := json.Marshal(string(l.ID))
		l.ID = q
	}
	b, _ := json.Marshal(l) // cannot fail: strings, numbers and valid raw JSON
	return b
}
