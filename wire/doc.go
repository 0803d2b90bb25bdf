// Package wire holds everything decant's stages agree on through Kafka:
// the message formats — the raw change event (streamer → map), the ref
// (map → build), the document envelope (build → aggregate topics), the
// snapshot marker (streamer → watermark) and the dead-letter record (every
// stage) — and the topic names (RawTopic, StateTopic, RefsTopic, AggTopic,
// DLQTopic), their configs and EnsureTopic, which creates them. No other
// package builds a topic name. They are the public contract described in
// docs/formats.md and pinned by the golden files in testdata/; every stage
// may import this leaf package, and it imports nothing of decant (only
// franz-go's kadm and kerr, for EnsureTopic).
//
// Keys of all three topics are JSON objects of key columns in key order,
// for example {"id":42} or {"order_id":7,"line_no":2}; see Key.
package wire
