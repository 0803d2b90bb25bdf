// Package wire holds the message formats that decant's stages exchange
// through Kafka: the raw change event (streamer → map), the ref (map →
// build) and the document envelope (build → aggregate topics). They are the
// public contract described in docs/formats.md; every stage may import this
// leaf package, and it imports nothing of decant.
//
// Keys of all three topics are JSON objects of key columns in key order,
// for example {"id":42} or {"order_id":7,"line_no":2}; see Key.
package wire
