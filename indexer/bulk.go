package indexer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/decant-cdc/decant/wire"
)

// action is one bulk operation: a document written to one target index.
// Its bytes (action line and source) are encoded before anything is sent,
// so sending is pure, retryable I/O.
type action struct {
	doc    int    // index into the Write's documents
	id     string // _id
	target string // _index: the alias, or the concrete index of a reindex in progress
	next   bool   // target is the reindex's new index, not the alias
	delete bool
	body   []byte // NDJSON lines, newline-terminated
}

// encodeAction returns the bulk NDJSON of writing d under _id id to index:
// an index operation, or a delete for a deleted document, both with
// version_type external_gte and the document's version. requireAlias makes
// an index operation fail instead of creating an index when target is not
// an alias (a delete cannot be guarded that way: Elasticsearch creates the
// missing index for it, so the sink checks that the alias exists first).
func encodeAction(d *wire.Document, id, index string, requireAlias bool) []byte {
	op := "index"
	if d.Deleted {
		op = "delete"
	}
	// Room for the action line too: a buffer one index name too small
	// was copied into one of twice the document's size.
	b := make([]byte, 0, 128+len(index)+len(id)+len(d.Doc))
	b = append(b, `{"`...)
	b = append(b, op...)
	b = append(b, `":{"_index":`...)
	b = wire.AppendString(b, index)
	b = append(b, `,"_id":`...)
	b = wire.AppendString(b, id)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, d.Version, 10)
	b = append(b, `,"version_type":"external_gte"`...)
	if requireAlias && !d.Deleted {
		b = append(b, `,"require_alias":true`...)
	}
	b = append(b, "}}\n"...)
	switch {
	case d.Deleted:
	case d.Built:
		b = append(b, d.Doc...) // compact already: no newline
		b = append(b, '\n')
	default:
		b = appendCompact(b, d.Doc)
		b = append(b, '\n')
	}
	return b
}

// appendCompact appends JSON without newlines (NDJSON needs one line per
// source). Documents built by PostgreSQL are compact already.
func appendCompact(b, doc []byte) []byte {
	for _, c := range doc {
		if c == '\n' || c == '\r' {
			return appendCompactSlow(b, doc)
		}
	}
	return append(b, doc...)
}

func appendCompactSlow(b, doc []byte) []byte {
	var m json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		return append(b, doc...) // checkDocument already refused invalid JSON
	}
	c, _ := json.Marshal(m) // Marshal compacts a RawMessage
	return append(b, c...)
}

// bulkResponse is the part of a _bulk response the sink reads.
type bulkResponse struct {
	Errors bool        `json:"errors"`
	Items  []bulkEntry `json:"items"`
}

// bulkEntry is one item of a _bulk response: an object with one key, the
// action's name. A struct, not a map: a map per item was most of the
// response's decoding cost.
type bulkEntry struct {
	Index  *bulkItem `json:"index"`
	Delete *bulkItem `json:"delete"`
	Create *bulkItem `json:"create"`
	Update *bulkItem `json:"update"`
}

type bulkItem struct {
	Index  string     `json:"_index"`
	Status int        `json:"status"`
	Result string     `json:"result"`
	Error  *bulkError `json:"error"`
}

type bulkError struct {
	Type     string     `json:"type"`
	Reason   string     `json:"reason"`
	CausedBy *bulkError `json:"caused_by"`
}

func (e *bulkError) String() string {
	if e == nil {
		return ""
	}
	s := e.Type + ": " + e.Reason
	if e.CausedBy != nil {
		s += " (caused by " + e.CausedBy.String() + ")"
	}
	return s
}

// outcome is what one bulk item's result means for the sink.
type outcome int

const (
	outcomeOK       outcome = iota // written, or deleted (found or not)
	outcomeConflict                // 409: the index holds the same or a newer version; a success
	outcomeRetry                   // transient or operational: retry with backoff
	outcomeReject                  // this document can never be written: dead-letter it
)

// classify is the one place that decides what an item result means.
//
//   - 2xx, and 404 "not_found" for a delete: success.
//   - 409 version_conflict_engine_exception: the target already holds this
//     or a newer version (a late or duplicate build): success, counted.
//   - 429 (queue full, circuit breaker) and 5xx: retry.
//   - cluster_block_exception (403: index read-only, for example after
//     the disk flood stage) and index_not_found_exception (the alias was
//     removed): operational problems an operator fixes; retry and log,
//     never dead-letter, or every document would be lost to the DLQ.
//   - anything else (mapper_parsing_exception, illegal_argument_exception,
//     strict_dynamic_mapping_exception, …): the document is refused for
//     good; dead-letter it with the reason.
func classify(del bool, it bulkItem) outcome {
	switch {
	case it.Status >= 200 && it.Status < 300:
		return outcomeOK
	case it.Status == 409:
		return outcomeConflict
	case del && it.Status == 404 && it.Error == nil:
		return outcomeOK
	case it.Status == 429 || it.Status >= 500:
		return outcomeRetry
	case it.Error != nil && (it.Error.Type == "cluster_block_exception" || it.Error.Type == "index_not_found_exception"):
		return outcomeRetry
	}
	return outcomeReject
}

// parseBulkResponse returns the item results of a _bulk response in request
// order, checking there is one per action.
func parseBulkResponse(body []byte, n int) ([]bulkItem, error) {
	if items, ok := scanBulkStatuses(body, n); ok {
		return items, nil
	}
	return decodeBulkResponse(body, n)
}

// decodeBulkResponse is parseBulkResponse with encoding/json: any
// response, errors included.
func decodeBulkResponse(body []byte, n int) ([]bulkItem, error) {
	var r bulkResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decode bulk response: %w", err)
	}
	if len(r.Items) != n {
		return nil, fmt.Errorf("bulk response has %d items for %d actions", len(r.Items), n)
	}
	items := make([]bulkItem, n)
	for i, e := range r.Items {
		switch {
		case e.Index != nil:
			items[i] = *e.Index
		case e.Delete != nil:
			items[i] = *e.Delete
		case e.Create != nil:
			items[i] = *e.Create
		case e.Update != nil:
			items[i] = *e.Update
		default:
			return nil, fmt.Errorf("bulk response item %d names no action", i)
		}
	}
	return items, nil
}

// scanBulkStatuses reads the response of a bulk request whose items all
// succeeded, as bulkFilter leaves it: {"items":[{"index":{"status":201}},
// …]}, compact, one of the four actions per item, n items. Anything else
// (an error, a name it does not expect, spaces, another count) is not
// ok, and parseBulkResponse decodes the body with encoding/json, which
// then gives the same items or an error (FuzzScanBulkStatuses).
// encoding/json's reflection was most of the Elasticsearch sink's CPU in
// a backfill: a tenth of decant's.
func scanBulkStatuses(body []byte, n int) ([]bulkItem, bool) {
	const head, key = `{"items":[`, `":{"status":`
	b, ok := bytes.CutPrefix(body, []byte(head))
	if !ok || n < 0 || n > len(body)/len(`{"index":{"status":200}}`) {
		return nil, false
	}
	items := make([]bulkItem, 0, n)
	for len(b) > 0 && b[0] != ']' {
		if len(items) > 0 {
			if b[0] != ',' {
				return nil, false
			}
			b = b[1:]
		}
		var op string
		for _, o := range [...]string{"index", "delete", "create", "update"} {
			if r, ok := bytes.CutPrefix(b, []byte(`{"`+o+key)); ok {
				op, b = o, r
				break
			}
		}
		if op == "" {
			return nil, false
		}
		status, digits := 0, 0
		for digits < len(b) && digits < 3 && b[digits] >= '0' && b[digits] <= '9' {
			status = status*10 + int(b[digits]-'0')
			digits++
		}
		if digits != 3 || b[0] == '0' {
			return nil, false
		}
		if b, ok = bytes.CutPrefix(b[digits:], []byte("}}")); !ok {
			return nil, false
		}
		items = append(items, bulkItem{Status: status})
	}
	if string(b) != "]}" || len(items) != n {
		return nil, false
	}
	return items, true
}
