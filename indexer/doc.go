// Package indexer is the last stage of decant: it writes built documents
// (wire.Document) to their sinks, the compacted Kafka aggregate topics
// <prefix>.agg.<aggregate> and Elasticsearch, and manages the Elasticsearch
// indexes behind each aggregate's alias.
//
//	resolver (build) ──Write(docs)──▶ KafkaSink ──▶ <prefix>.agg.<aggregate>   key = id object, value = envelope
//	                               └─▶ ESSink    ──▶ _bulk to the alias            _id = id text, external_gte version
//	                                      │
//	                                      └─ refused for good ──▶ <prefix>.dlq
//
// Both sinks implement the build stage's Sink contract: Write blocks until
// every document is acknowledged (Kafka acks=all; Elasticsearch bulk item
// results) or dead-lettered, and returns an error only when the batch must
// be retried, so the caller commits its refs offsets only after the sinks
// have the documents. Both are safe for concurrent use. Neither imports the
// resolver: cmd/decant wires them.
//
// # Guarantees
//
//   - Idempotent: writing a batch again, whole or in part, changes nothing.
//     The aggregate topic is compacted by key; Elasticsearch documents are
//     addressed by _id.
//   - Version-guarded: Document.Version is the build's WAL position, which
//     only grows. Elasticsearch writes and deletes carry it with
//     version_type=external_gte, so a late or replayed build never replaces
//     a newer document; the resulting 409 is a success, counted in
//     decant_indexer_conflicts_total. An equal version is the same build
//     and is simply written again. A delete of a missing document (404) is a
//     success too, and leaves a versioned tombstone that refuses older
//     builds for index.gc_deletes (60s by default).
//   - Per key, versions in the aggregate topic never decrease. The caller
//     writes each key's documents in order (one refs partition, one worker;
//     after a crash the refs are rebuilt with newer versions); KafkaSink
//     adds a bounded in-process guard that skips a document older than one
//     it already wrote for the key. Across processes the build stage must
//     finish its in-flight Write before giving up a refs partition.
//   - A deleted document is written as its envelope (deleted: true, doc:
//     null) followed by a tombstone with the same key.
//   - Nothing is dropped silently: a document a sink refuses for good
//     (Elasticsearch mapper_parsing_exception, strict mapping, too large;
//     Kafka MESSAGE_TOO_LARGE; an invalid envelope) is written to
//     <prefix>.dlq as {"stage":"index","sink","aggregate","id","version",
//     "index"|"topic","status","reason"} keyed by the aggregate id, logged,
//     and counted in decant_indexer_dlq_total{sink,aggregate}; the rest of
//     the batch is written. Retriable failures (429, 5xx, connection loss,
//     a read-only index) are retried with bounded exponential backoff and
//     never dead-lettered; a missing alias fails the Write at once (the
//     caller retries; EnsureIndex recreates it at start-up).
//
// # Indexes and reindexing
//
// An aggregate's alias (mappings Aggregate.Index) points at one concrete
// index <alias>_<hash>, where hash is 8 hex digits of the SHA-256 of its
// settings and mappings (replica count excluded). EnsureIndex creates both
// when missing and refuses, with a MappingChangedError, to start on changed
// mappings. A mapping change is applied by Reindex:
//
//  1. StartReindex creates the new concrete index and points the marker
//     alias <alias>-next at it. Every ESSink re-reads the marker at least
//     every RecheckInterval and then writes each document to both the alias
//     and the new index; StartReindex waits ReindexOptions.Settle so all of
//     them do before it returns. The marker lives in Elasticsearch, so this
//     works across processes.
//  2. The caller backfills: it enqueues every id of the aggregate into the
//     refs topic and waits until they are built and written (there is one
//     build path).
//  3. SwapAlias refreshes the new index and, in one _aliases call, moves the
//     alias to it and removes the marker. Searches against the alias never
//     fail and never see a partly filled index. The old index is deleted
//     after Settle unless KeepOld.
//
// # Example
//
//	kafka, err := indexer.NewKafkaSink(indexer.KafkaSinkConfig{Kafka: opts, TopicPrefix: "decant"})
//	…
//	if _, err := indexer.EnsureIndex(ctx, es, indexer.SpecFor(agg, false)); err != nil {
//		return err // *MappingChangedError: run `decant backfill <aggregate> --reindex`
//	}
//	search, err := indexer.NewESSink(indexer.ESSinkConfig{Client: es, Kafka: opts,
//		Aliases: map[string]string{agg.Name: agg.Index}})
//	…
//	err = search.Write(ctx, docs) // nil: indexed, superseded or dead-lettered
package indexer
