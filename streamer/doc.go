// Package streamer copies every committed row change from PostgreSQL into
// Kafka: one compacted raw topic per table, <prefix>.raw.<schema>.<table>,
// keyed by primary key, values in the JSON format of docs/formats.md.
//
// # How it works
//
// The streamer owns a logical replication slot (pgoutput). On first start it
// creates the slot with an exported snapshot, reads every published table
// inside that snapshot (op "r"), and then streams from the slot's consistent
// point, so nothing is missed or doubled. Later starts resume from the
// slot's confirmed position.
//
// A table that joins later — one the mappings start using (added to the
// publication when Config.CreatePublication allows) or one `decant
// snapshot` names (RequestTableSnapshot) — is snapshotted online while
// every other table streams: read in primary-key chunks between a low and
// a high watermark written to the WAL, each chunk written at its high
// watermark without the keys a change touched in between (tablesnap.go,
// DESIGN.md "Online table snapshots").
//
// # Guarantees
//
//   - No loss: the slot's confirmed LSN advances only past transactions whose
//     every record Kafka acknowledged with acks=all (see progress.go). After a
//     crash the slot re-sends everything after that point: delivery is
//     at-least-once. A consumer drops duplicates by keeping, per key, the
//     greatest (source.commit_lsn, source.seq) it applied.
//   - Order: records of one key go to one partition in commit order.
//   - No gap after a crash mid-snapshot: a marker in <prefix>.state says when
//     the snapshot finished; a slot without it is dropped and the snapshot redone.
//     An online table snapshot records there the last key of every chunk Kafka
//     acknowledged, and resumes after it.
//   - No stale snapshot row: an online snapshot's row is never written after a
//     newer change of its key; each key's last record ends equal to the table.
//   - Bounded memory: records stream to a producer with a bounded buffer
//     (Config.MaxInFlight); a large transaction is streamed by PostgreSQL
//     before it commits (protocol 2, PostgreSQL 14+) and spooled to an
//     unlinked temporary file, replayed at commit (or spilled to disk by
//     PostgreSQL's reorder buffer on older servers), never held in memory.
//   - Never a wrong value: a TOASTed column PostgreSQL did not send is omitted
//     from "after" and listed in "unchanged_toast" (or filled from the old row
//     when the table has REPLICA IDENTITY FULL).
//   - One active streamer per slot: the slot is the lock; a second instance
//     waits and takes over when the first dies.
//
// # Example
//
//	s, err := streamer.New(streamer.Config{
//		DSN:   "postgres://decant@db/shop",
//		Slot:  "decant",
//		Kafka: []kgo.Opt{kgo.SeedBrokers("kafka:9092")},
//	})
//	if err != nil { … }
//	defer s.Close()
//	err = s.Run(ctx) // blocks until ctx is cancelled
//
// Values are encoded exactly as PostgreSQL's to_jsonb() encodes them
// (encode.go, pgtypes.go); the session settings the encoder relies on are
// set on every connection the streamer opens (sessionParams).
package streamer
