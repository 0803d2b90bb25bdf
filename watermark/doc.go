// Package watermark tells how far each stage of decant has got, as an LSN,
// from what PostgreSQL and Kafka already store — so the answer holds across
// processes and instances, not only inside `decant run`:
//
//   - stream: the slot's confirmed_flush_lsn. The streamer confirms only what
//     Kafka acknowledged, so every change committed before it is in a raw topic.
//   - map: the map consumer group's committed offsets on the raw topics.
//   - build: the build consumer group's committed offsets on the refs topics.
//
// Wait(L) is read-your-writes: it returns once every change committed at or
// before L is reflected in all sinks. It proceeds in three steps, each sound
// because every stage commits only after the next one acknowledged:
//
//  1. the slot confirms L, so every change ≤ L is below the raw topics'
//     current end offsets E_raw;
//  2. the map group's committed offsets reach E_raw, so every ref caused by
//     those changes is below the refs topics' current end offsets E_refs;
//  3. the build group's committed offsets reach E_refs, so every document
//     rebuilt because of them is written to every sink.
//
// The caller then refreshes Elasticsearch so the documents are searchable.
//
// Status is what `decant status` shows: the slot (lag, WAL retention
// headroom and the warnings that need an operator), the watermarks, the
// dead letters ever written and the documents per aggregate. Dial opens a
// Tracker with its own Kafka client; SlotLagGauge is the slot-lag metric
// every decant process serves.
package watermark
