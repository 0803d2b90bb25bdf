// Package resolver owns the two middle stages of the pipeline: map (raw
// changes → refs) and build (refs → documents). It reads the raw topics the
// streamer writes, the model and SQL of package mappings, and PostgreSQL;
// it writes the refs topics and hands finished documents to a Sink, which
// package indexer implements (aggregate topics, Elasticsearch) and
// cmd/decant wires in. It never imports another stage.
//
//	<prefix>.raw.<schema>.<table> ──Mapper──▶ <prefix>.refs.<aggregate> ──Builder──▶ Sink
//	                              (group <Group>.map)                 (group <Group>.build)
//
// # Map
//
// For each polled batch of raw changes (at most 8 × BatchSize), and for each
// route of the changed table (mappings.Model.RoutesFor), the Mapper feeds
// the From columns of the before and the after image to the route: a
// direct route gives aggregate ids at once, a lookup route collects the
// distinct From tuples of the whole batch and runs ONE lookup query per
// route (chunks of BatchSize tuples, `= ANY($1)`), never one per row. An
// update that changes none of the route's Watch columns resolves to
// nothing. A root key change arrives as a delete and an insert, so the old
// id (deleted) and the new id are both enqueued. A TRUNCATE of any table
// of an aggregate enqueues every current root id (keyset pagination), and
// for the root table also every id that has a document (the keys of the
// compacted aggregate topic), so documents whose roots are gone are
// deleted. Lookups and truncations run in one REPEATABLE READ snapshot in
// which every transaction of the batch is visible.
//
// An update or delete whose before image lacks a route's From columns (the
// table's replica identity was set back from FULL while decant ran; decant
// refuses to start so) cannot name the documents the row belonged to: its
// after image is still resolved, and the change goes to <prefix>.dlq with
// the fix (REPLICA IDENTITY FULL, then decant backfill), counted in
// decant_resolver_map_dlq_total and logged once per table and batch.
//
// Refs are coalesced per batch (one per aggregate id, attributed to the
// latest change) and keyed by the aggregate id as a JSON object, the same
// bytes as a raw key of the root table, so every ref of one id lands on
// one partition. Large fan-outs stream: rows are produced as the lookup
// returns them, the duplicate filter is bounded, and Produce blocks once
// MaxBufferedRefs refs are unacknowledged.
//
// # Build
//
// For each polled batch of refs (at most 8 × BatchSize × Workers), the
// Builder coalesces keys per partition,
// then for each chunk of at most BatchSize ids: reads pg_current_wal_lsn()
// (the version), begins a REPEATABLE READ READ ONLY transaction, checks
// that the transactions named by the refs are visible in its snapshot
// (xid widened to xid8 with the snapshot's epoch; retried every 20ms up to
// VisibilityTimeout), and runs the aggregate's Build statement. Ids without
// a row become Deleted documents. The documents go to the Sink in groups
// of about WriteBytes. The next batch is polled and starts building while
// the previous one's last groups are written; offsets are committed in
// poll order. A batch naming a key an earlier batch in flight still writes
// builds it once that batch wrote the aggregate topics, and writes it to
// the other sinks once that batch is done: a key's builds reach every
// sink in order, and a slow Elasticsearch does not hold back the
// aggregate topics, even for the documents it holds.
// Partitions are built concurrently (Workers); the ids of one partition
// are built in order, so a later build of a key never carries a lower
// version.
//
// # Guarantees
//
//   - Progress only after acknowledgement: the Mapper commits raw offsets
//     only after Kafka acknowledged (acks=all) every ref of the batch; the
//     Builder commits refs offsets only after Sink.Write returned nil for
//     every document of the batch. A failure anywhere ends the session
//     without committing; it restarts after a backoff and consumes the
//     batch again (runSessions is the single retry path).
//   - At-least-once, made harmless: a ref may be delivered twice and a
//     document built twice. Builds read the current database, and each
//     document carries a version that increases with the time the build
//     started; sinks keep the highest version (external_gte, compaction
//     plus a version guard), so duplicates and replays never regress a
//     document.
//   - Convergence: every change's refs cover the documents that contained
//     the row before and those that contain it after, so once writes stop
//     and the lags drain, every document equals what Build returns.
//   - Bounded memory: batches, lookups, truncations and backfills stream
//     with fixed-size buffers.
//
// # Example
//
//	pool, err := resolver.NewPool(ctx, dsn, "decant-resolver", 0)
//	if err != nil {
//		return err
//	}
//	cfg := resolver.Config{Kafka: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092")}, TopicPrefix: "shop"}
//	m, err := resolver.NewMapper(cfg, model, pool)
//	if err != nil {
//		return err
//	}
//	b, err := resolver.NewBuilder(cfg, model, pool, resolver.Sinks{kafkaSink, esSink})
//	if err != nil {
//		return err
//	}
//	// run both until ctx is cancelled (errgroup or two goroutines)
//	go m.Run(ctx)
//	return b.Run(ctx)
//
// Backfill enqueues every root id of an aggregate into its refs topic and
// WaitBuilt waits until the build group committed past them; NeedsBackfill
// says whether an aggregate has no documents yet. Preview builds one
// document without writing it.
//
// # Testing
//
// Pure functions (watch filtering, From extraction, coalescing, xid8
// widening, id parsing) have table tests that need no server. The e2e
// tests in e2e/resolver_*_test.go run a real streamer, Mapper, Builder and
// the indexer's sinks against PostgreSQL, Kafka and Elasticsearch and
// compare every document with an independent oracle query.
package resolver
