package wire

import "encoding/json"

// Stages, as named in DeadLetter.Stage.
const (
	StageStream = "stream" // streamer: WAL → raw topics
	StageMap    = "map"    // resolver map: raw changes → refs
	StageBuild  = "build"  // resolver build: refs → documents
	StageIndex  = "index"  // indexer sinks: documents → aggregate topics, Elasticsearch
)

// DeadLetter is the value of a record in DLQTopic: something a stage could
// not write, and why. Each stage fills the fields that apply to it and the
// others are left out of the JSON (docs/formats.md, "Dead-letter topic"):
//
//   - stream, row cannot be encoded: Table, LSN, Reason;
//   - stream, Kafka refused the raw record: Topic, Key, ValueBytes, Reason;
//   - map, change without the before image it needs: Table, Op, Key, LSN,
//     CommitLSN, Aggregates, Missing, Reason;
//   - map, raw record that is not a change event, and build, ref whose key
//     is not an id of its aggregate (or whose value is not a ref): Topic,
//     Record, Key, ValueBytes, Reason;
//   - index: Sink, Aggregate, ID, Version, Index or Topic, Status, Reason.
type DeadLetter struct {
	Stage      string          `json:"stage"`                 // StageStream, StageMap, StageBuild or StageIndex
	Sink       string          `json:"sink,omitempty"`        // index: "elasticsearch" or "kafka"
	Table      string          `json:"table,omitempty"`       // source table "schema.table"
	Aggregate  string          `json:"aggregate,omitempty"`   // index: aggregate name
	ID         json.RawMessage `json:"id,omitempty"`          // index: aggregate id object
	Version    uint64          `json:"version,omitempty"`     // index: document version
	Index      string          `json:"index,omitempty"`       // index: Elasticsearch alias or index that refused it
	Topic      string          `json:"topic,omitempty"`       // the Kafka topic that refused the record, or that holds the unreadable one
	Record     string          `json:"record,omitempty"`      // map, build: the unreadable record, topic/partition/offset
	Op         Op              `json:"op,omitempty"`          // map: op of the change
	Key        json.RawMessage `json:"key,omitempty"`         // the refused record's key (raw key)
	ValueBytes int             `json:"value_bytes,omitempty"` // stream: size of the refused value
	LSN        string          `json:"lsn,omitempty"`         // LSN of the change
	CommitLSN  string          `json:"commit_lsn,omitempty"`  // map: commit LSN of the change
	Aggregates []string        `json:"aggregates,omitempty"`  // map: aggregates whose documents may be stale
	Missing    []string        `json:"missing,omitempty"`     // map: columns the before image lacks
	Status     int             `json:"status,omitempty"`      // index: HTTP status of the bulk item
	Reason     string          `json:"reason"`                // why, with the fix when there is one
}

// Encode returns the Kafka key and value of the dead letter. The key is, as
// given: for the index stage the aggregate id (ID); otherwise Key when set
// (the refused raw record's key); otherwise {"table":Table}. In the value,
// Key and ID that are not valid JSON are written as JSON strings, so Encode
// cannot fail. Strings are escaped as json.Marshal escapes them.
func (d DeadLetter) Encode() (key, value []byte) {
	switch {
	case d.Stage == StageIndex:
		key = d.ID
	case len(d.Key) > 0:
		key = d.Key
	default:
		key = append(append([]byte(`{"table":`), marshal(d.Table)...), '}')
	}
	d.Key, d.ID = validJSON(d.Key), validJSON(d.ID)
	if d.Stage == StageIndex && len(d.ID) == 0 {
		d.ID = json.RawMessage(`""`) // the index stage always names the id
	}
	return key, marshal(&d)
}

// marshal is json.Marshal for values that cannot fail to encode (strings,
// numbers, valid raw JSON).
func marshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// validJSON returns raw unchanged when empty or valid JSON, else raw as a
// JSON string.
func validJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || json.Valid(raw) {
		return raw
	}
	q, _ := json.Marshal(string(raw))
	return q
}
