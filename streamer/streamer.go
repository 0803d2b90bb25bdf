package streamer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/wire"
)

// Streamer copies committed row changes from a logical replication slot to
// Kafka raw topics. Create it with New, run it with Run.
type Streamer struct {
	cfg     Config
	log     *slog.Logger
	met     *metrics
	types   *pgTypes
	redact  map[string]*redactor // streamer.redact
	kafka   *kgo.Client
	admin   *kadm.Client
	topics  sync.Map // topic name → struct{} once created
	fatal   atomic.Pointer[error]
	job     atomic.Pointer[tableJob] // the online table snapshot in progress (tablesnap.go)
	lastMsg atomic.Int64             // unix nanos of the last WAL message received

	closeOnce sync.Once
	produced  atomic.Uint64 // records handed to the producer, for sampling
	// encodedEarly and encodedAtCommit count row changes of streamed
	// transactions encoded before their commit and spooled as messages
	// (spoolStreamed), for tests.
	encodedEarly, encodedAtCommit atomic.Int64
}

// sessionParams are the session settings the value encoder assumes: the
// text form of every value is produced under them, on the replication
// connection and on the snapshot connection alike.
var sessionParams = map[string]string{
	"TimeZone":           "UTC",
	"DateStyle":          "ISO, MDY",
	"IntervalStyle":      "postgres",
	"bytea_output":       "hex",
	"extra_float_digits": "1",
	"application_name":   "decant-streamer",
}

// New validates cfg and creates the Kafka client. It does no other I/O.
func New(cfg Config) (*Streamer, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(cfg.MaxInFlight),
		// and bytes: 100,000 records of wide rows (TOASTed text, jsonb)
		// are hundreds of megabytes.
		kgo.MaxBufferedBytes(maxBufferedBytes),
		// A request carries every partition's batch, lingering or not, so
		// under load the linger costs nothing; at 100 single-row
		// transactions a second, 25ms instead of 5ms put 2-3 records in a
		// request instead of 1 and cut decant's CPU per change by a fifth
		// (BenchmarkFreshness, docs/performance.md "Ninth pass").
		kgo.ProducerLinger(25 * time.Millisecond),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.ProducerBatchCompression(kgo.NoCompression()), // kafka.compression overrides it
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		// The snapshot produces to topics created a moment before: with
		// the default of 5s, a first metadata answer that did not list
		// them yet held the whole snapshot up for 5s.
		kgo.MetadataMinAge(100 * time.Millisecond),
		// Lets dropUnacknowledged fail records whose produce request may
		// have been sent: without it, kgo keeps retrying them while Kafka
		// is unreachable and writes them once it is back, after the
		// session ended. A record failed that Kafka had in fact written
		// is streamed again: a duplicate, in order.
		kgo.AllowIdempotentProduceCancellation(),
	}, cfg.Kafka...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("streamer: kafka client: %w", err)
	}
	return &Streamer{cfg: cfg, redact: newRedactors(cfg.Redact, cfg.MaskText, cfg.HashSalt), log: cfg.Logger.With("stage", "stream", "slot", cfg.Slot), met: newMetrics(cfg.Registerer),
		types: newPGTypes(), kafka: cl, admin: kadm.NewClient(cl)}, nil
}

// Close releases the Kafka client. It is idempotent; call it after Run returns.
func (s *Streamer) Close() {
	s.closeOnce.Do(func() { s.kafka.Close() })
}

// errSlotBusy means another process streams from the slot: wait and retry.
var errSlotBusy = errors.New("replication slot is in use by another process")

// Run streams until ctx is cancelled or a non-retriable error occurs. A
// standby (the slot is held by another streamer) waits and takes over when
// the slot becomes free. Transient errors (connection loss, server restart)
// restart the session after a backoff; the slot makes this lossless. Run
// returns nil on cancellation, after flushing what was produced.
func (s *Streamer) Run(ctx context.Context) error {
	backoff := time.Second
	waiting := false
	for {
		began := time.Now()
		err := s.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) > time.Minute {
			// A session that ran for a while is a new outage (a failover,
			// a restart), not the same one: reconnect soon.
			backoff = time.Second
		}
		switch {
		case errors.Is(err, errSlotBusy):
			if !waiting {
				s.log.Info("slot is held by another streamer; standing by to take over")
				waiting = true
			}
			if !ctxtime.Sleep(ctx, s.cfg.TakeoverPoll) {
				return nil
			}
			continue
		case isPermanent(err):
			return err
		}
		waiting = false
		s.log.Warn("stream session ended; restarting", "err", err, "backoff", backoff)
		if !ctxtime.Sleep(ctx, backoff) {
			return nil
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// permanentError marks errors a restart cannot fix (bad configuration,
// missing publication, unencodable schema).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }

func isPermanent(err error) bool {
	var p *permanentError
	if errors.As(err, &p) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01", "28000", "3D000", "42501": // bad password, no access, no database, no privilege
			return true
		}
	}
	return false
}

func withParams(dsn string, replication bool) (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, permanent(fmt.Errorf("postgres.dsn: %w", err))
	}
	for k, v := range sessionParams {
		cfg.RuntimeParams[k] = v
	}
	if replication {
		cfg.RuntimeParams["replication"] = "database"
		coalesceReads(cfg)
	}
	return cfg, nil
}

// session is one connection lifetime: take the slot, snapshot if the slot
// is new, then stream. It returns when the context ends or on error, after
// waiting for every produced record to be acknowledged.
func (s *Streamer) session(ctx context.Context) (err error) {
	pool, err := s.connectPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := s.ensurePublication(ctx, pool); err != nil {
		return err
	}
	added, err := s.requestMappedTables(ctx, pool)
	if err != nil {
		return err
	}
	// Rows that cannot be encoded or written go to the dead-letter topic.
	if err := s.ensureTopic(ctx, wire.DLQTopic(s.cfg.TopicPrefix), int32(s.cfg.Partitions), wire.DLQTopicConfigs()); err != nil {
		return err
	}
	rcfg, err := withParams(s.cfg.DSN, true)
	if err != nil {
		return err
	}
	repl, err := pgconn.ConnectConfig(ctx, rcfg)
	if err != nil {
		return fmt.Errorf("replication connection: %w", err)
	}
	defer repl.Close(context.Background())
	// Before the slot is released (above), nothing of this session may
	// still be on its way to Kafka.
	defer s.dropUnacknowledged()

	start, snapshotted, err := s.takeSlot(ctx, pool, repl)
	if err != nil {
		return err
	}
	if snapshotted {
		// The tables just added were in the publication when the slot's
		// snapshot read it: their online snapshot is not needed.
		for _, t := range added {
			if err := s.writeTableSnapshot(ctx, wire.TableSnapshot{Table: t, ID: wire.FormatLSN(start), Done: true}); err != nil {
				return err
			}
		}
	}
	if err := s.startReplication(ctx, pool, repl, start); err != nil {
		return err
	}
	s.log.Info("streaming", "from", wire.FormatLSN(start))
	return s.stream(ctx, pool, repl, start)
}

// connectPool connects the small pool of plain (not replication)
// connections a session uses for catalog queries and snapshots.
func (s *Streamer) connectPool(ctx context.Context) (*pgxpool.Pool, error) {
	pcfg, err := withParams(s.cfg.DSN, false)
	if err != nil {
		return nil, err
	}
	poolCfg, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	poolCfg.ConnConfig.Config = *pcfg
	poolCfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return pool, nil
}

// takeSlot returns the LSN to stream from: the slot's confirmed LSN, or,
// when the slot is missing (or its initial snapshot never completed and it
// was dropped), the consistent point of a new slot, after the initial
// snapshot when SnapshotMode is "initial". errSlotBusy means another
// process holds the slot. A slot a promoted standby synchronized from the
// old primary (PostgreSQL 17+ failover slots) is an existing slot like
// any other: it is resumed, never dropped or snapshotted again.
// snapshotted says whether a new slot's initial snapshot was taken.
func (s *Streamer) takeSlot(ctx context.Context, pool *pgxpool.Pool, repl *pgconn.PgConn) (start uint64, snapshotted bool, err error) {
	srv, err := readServer(ctx, pool)
	if err != nil {
		return 0, false, err
	}
	failover, err := s.wantFailover(srv)
	if err != nil {
		return 0, false, err
	}
	st, err := s.slotState(ctx, pool)
	if err != nil {
		return 0, false, err
	}
	if st.exists && st.active {
		return 0, false, errSlotBusy
	}
	if st.exists && st.synced && srv.inRecovery {
		// Until its standby is promoted, a synchronized slot can be
		// neither used nor dropped: a multi-host postgres.dsn reached the
		// standby first. Wait for the promotion (or the primary).
		return 0, false, fmt.Errorf("slot %s on this server is a copy synchronized from the primary and this server is still a standby: "+
			"waiting for its promotion (add target_session_attrs=primary to a multi-host postgres.dsn)", s.cfg.Slot)
	}
	if st.exists && s.cfg.SnapshotMode == "initial" {
		done, err := s.snapshotDone(ctx)
		if err != nil {
			return 0, false, err
		}
		if !done {
			s.log.Warn("slot exists but its initial snapshot never completed; dropping it to snapshot again")
			if err := pglogrepl.DropReplicationSlot(ctx, repl, s.cfg.Slot, pglogrepl.DropReplicationSlotOptions{}); err != nil {
				if isInUse(err) {
					return 0, false, errSlotBusy
				}
				return 0, false, fmt.Errorf("drop unfinished slot %s: %w", s.cfg.Slot, err)
			}
			st.exists = false
		}
	}
	if st.exists {
		if st.synced {
			s.log.Info("resuming a slot synchronized from the former primary", "lsn", wire.FormatLSN(st.confirmed))
		}
		if failover && !st.failover {
			if err := alterSlotFailover(ctx, repl, s.cfg.Slot); err != nil {
				return 0, false, err
			}
			s.log.Info("replication slot set to failover = true: standbys with sync_replication_slots = on keep a copy")
		}
		return st.confirmed, false, nil
	}
	action := "EXPORT_SNAPSHOT"
	if s.cfg.SnapshotMode == "never" {
		action = "NOEXPORT_SNAPSHOT"
	}
	res, err := createSlot(ctx, repl, s.cfg.Slot, action, failover)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" { // created by a peer meanwhile
			return 0, false, errSlotBusy
		}
		return 0, false, fmt.Errorf("create slot %s: %w", s.cfg.Slot, err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, false, err
	}
	start = uint64(cp)
	s.log.Info("created replication slot", "lsn", res.ConsistentPoint, "snapshot", res.SnapshotName, "failover", failover)
	if s.cfg.SnapshotMode == "initial" {
		if err := s.initialSnapshot(ctx, pool, res.SnapshotName, start); err != nil {
			return 0, false, err
		}
		return start, true, nil
	}
	return start, false, nil
}

// startReplication starts logical replication on the slot from start.
func (s *Streamer) startReplication(ctx context.Context, pool *pgxpool.Pool, repl *pgconn.PgConn, start uint64) error {
	// PostgreSQL 14+ streams transactions larger than logical_decoding_work_mem
	// before they commit (protocol 2); decant spools them and emits them at
	// commit, so PostgreSQL does not spill them to its own disk first.
	// Logical messages carry the watermarks of online table snapshots
	// (tablesnap.go); others are ignored.
	args := []string{"proto_version '1'", "publication_names " + quoteLiteral(s.cfg.Publication), "messages 'true'"}
	var version int
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	if version >= 140000 {
		args[0] = "proto_version '2'"
		args = append(args, "streaming 'on'")
	}
	err := pglogrepl.StartReplication(ctx, repl, s.cfg.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{PluginArgs: args})
	if err != nil {
		if isInUse(err) {
			return errSlotBusy
		}
		return fmt.Errorf("start replication on slot %s: %w", s.cfg.Slot, err)
	}
	return nil
}

// initialSnapshot brackets the snapshot with its markers (see snapshotMarker).
func (s *Streamer) initialSnapshot(ctx context.Context, pool *pgxpool.Pool, name string, cp uint64) error {
	if err := s.markSnapshot(ctx, false, cp); err != nil {
		return err
	}
	if err := s.snapshot(ctx, pool, name, cp); err != nil {
		return fmt.Errorf("initial snapshot: %w", err)
	}
	return s.markSnapshot(ctx, true, cp)
}

func isInUse(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

type slotInfo struct {
	exists, active bool
	// failover and synced are the PostgreSQL 17+ columns (false before):
	// the slot is synchronized to standbys; it is a standby's copy of a
	// primary's slot (still true after that standby's promotion).
	failover, synced bool
	confirmed        uint64
}

func (s *Streamer) slotState(ctx context.Context, pool *pgxpool.Pool) (slotInfo, error) {
	var si slotInfo
	var plugin, db string
	var lsn *string
	// to_jsonb: failover and synced exist from PostgreSQL 17 only.
	err := pool.QueryRow(ctx, `SELECT active, plugin, database, confirmed_flush_lsn::text,
       coalesce((to_jsonb(s)->>'failover')::bool, false), coalesce((to_jsonb(s)->>'synced')::bool, false)
FROM pg_replication_slots s WHERE slot_name = $1`, s.cfg.Slot).
		Scan(&si.active, &plugin, &db, &lsn, &si.failover, &si.synced)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, nil
	}
	if err != nil {
		return si, fmt.Errorf("read slot %s: %w", s.cfg.Slot, err)
	}
	si.exists = true
	if plugin != "pgoutput" {
		return si, permanent(fmt.Errorf("slot %s uses plugin %q, not pgoutput: drop it or choose another postgres.slot", s.cfg.Slot, plugin))
	}
	if lsn != nil {
		v, err := wire.ParseLSN(*lsn)
		if err != nil {
			return si, err
		}
		si.confirmed = v
	}
	return si, nil
}

// ensurePublication checks that the publication exists, creating it when allowed.
func (s *Streamer) ensurePublication(ctx context.Context, pool *pgxpool.Pool) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, s.cfg.Publication).Scan(&exists); err != nil {
		return fmt.Errorf("read publication: %w", err)
	}
	if exists {
		return nil
	}
	if !s.cfg.CreatePublication {
		return permanent(fmt.Errorf("publication %q does not exist: run `CREATE PUBLICATION %s FOR TABLE …;` or set postgres.create_publication: true",
			s.cfg.Publication, pgx.Identifier{s.cfg.Publication}.Sanitize()))
	}
	sql := "CREATE PUBLICATION " + pgx.Identifier{s.cfg.Publication}.Sanitize()
	if len(s.cfg.Tables) == 0 {
		sql += " FOR ALL TABLES"
	} else {
		names := make([]string, len(s.cfg.Tables))
		for i, t := range s.cfg.Tables {
			schema, table, ok := strings.Cut(t, ".")
			if !ok {
				schema, table = "public", t
			}
			names[i] = pgx.Identifier{schema, table}.Sanitize()
		}
		sql += " FOR TABLE " + strings.Join(names, ", ")
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" {
			return nil
		}
		return fmt.Errorf("create publication %s: %w", s.cfg.Publication, err)
	}
	s.log.Info("created publication", "publication", s.cfg.Publication, "tables", len(s.cfg.Tables))
	return nil
}

// ensureTopic creates a topic once per process (wire.EnsureTopic), with
// configs: wire.RawTopicConfigs, StateTopicConfigs or DLQTopicConfigs.
func (s *Streamer) ensureTopic(ctx context.Context, topic string, partitions int32, configs map[string]string) error {
	if _, ok := s.topics.Load(topic); ok {
		return nil
	}
	if err := wire.EnsureTopic(ctx, s.admin, topic, partitions, int16(s.cfg.ReplicationFactor), int16(s.cfg.MinInsyncReplicas), configs); err != nil {
		return err
	}
	s.topics.Store(topic, struct{}{})
	return nil
}

// produce hands one record to the producer; m is acked when Kafka has it.
// It blocks when MaxInFlight records are unacknowledged (backpressure).
func (s *Streamer) produce(ctx context.Context, rec record, m *txnMark, lsn uint64) {
	m.add()
	if m.lsn != lsn || m.lsnText == nil { // one header value per transaction, shared by its records
		m.lsn, m.lsnText = lsn, wire.AppendLSN(nil, lsn)
	}
	if m.promise == nil { // one callback per transaction, not per record
		m.promise = func(r *kgo.Record, err error) {
			if err != nil {
				s.produceFailed(r, err, m)
				return
			}
			s.met.bytes.Add(float64(len(r.Key) + len(r.Value)))
			m.ack()
		}
	}
	// Record and headers in one allocation: this runs for every row.
	o := &struct {
		kgo.Record
		hdr [2]kgo.RecordHeader
	}{}
	o.hdr = [2]kgo.RecordHeader{{Key: wire.HeaderLSN, Value: m.lsnText}, {Key: wire.HeaderOp, Value: opBytes[rec.op]}}
	o.Record = kgo.Record{Topic: rec.topic, Key: rec.key, Value: rec.value, Headers: o.hdr[:]}
	if j := s.job.Load(); j != nil && j.open >= 0 && rec.topic == j.rel.topic {
		j.touch(rec.key) // a change inside an online snapshot chunk's window
	}
	// Produce latency is sampled (one record in 64): reading the clock
	// twice per row is measurable at 100k rows/s.
	if s.produced.Add(1)%64 != 0 {
		s.kafka.Produce(ctx, &o.Record, m.promise)
		return
	}
	started := time.Now()
	s.kafka.Produce(ctx, &o.Record, func(r *kgo.Record, err error) {
		if err == nil {
			s.met.produceLatency.Observe(time.Since(started).Seconds())
		}
		m.promise(r, err)
	})
}

// produceFailed handles a record Kafka refused. A record that can never be
// written (too large) goes to the dead-letter topic and is counted; any other
// failure stops the session without acking, so the slot is not confirmed
// past it and the change is re-streamed after restart.
func (s *Streamer) produceFailed(r *kgo.Record, err error, m *txnMark) {
	if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.InvalidRecord) {
		key, value := wire.DeadLetter{Stage: wire.StageStream, Topic: r.Topic, Key: r.Key, ValueBytes: len(r.Value), Reason: err.Error()}.Encode()
		dlq := &kgo.Record{Topic: wire.DLQTopic(s.cfg.TopicPrefix), Key: key, Value: value, Headers: r.Headers}
		s.kafka.Produce(context.Background(), dlq, func(_ *kgo.Record, derr error) {
			if derr != nil {
				s.setFatal(fmt.Errorf("topic %s: %w; and the dead-letter topic refused it too: %v", r.Topic, err, derr))
				return
			}
			s.met.dlq.Inc()
			s.log.Error("raw event refused by Kafka; written to the dead-letter topic", "topic", r.Topic, "err", err)
			m.ack()
		})
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrAborting) {
		return // the session is ending (dropUnacknowledged)
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
		// Deleted under us: forget it, so the next session creates it again
		// (the slot re-sends everything not acknowledged).
		s.topics.Delete(r.Topic)
		s.kafka.PurgeTopicsFromClient(r.Topic)
		s.setFatal(fmt.Errorf("produce to %s: %w (was the topic deleted? the session restarts and creates it again)", r.Topic, err))
		return
	}
	s.setFatal(fmt.Errorf("produce to %s: %w", r.Topic, err))
}

// dropUnacknowledged fails every record the session produced that Kafka
// has not acknowledged, and waits until none of them can still be written.
// The slot was not confirmed past them, so whoever streams from it next
// sends them again. Kept in the client instead, they were written when
// Kafka came back: a session that ended while Kafka was unreachable (say
// PostgreSQL restarted during a Kafka outage) delivered them after the
// records of the streamer that had taken the slot meanwhile, and a raw
// topic's last record of a key was then older than its row, or a deleted
// row's. A session that was stopped has flushed first (stream).
func (s *Streamer) dropUnacknowledged() {
	n := s.kafka.BufferedProduceRecords()
	if n == 0 {
		return
	}
	// AbortBufferedRecords waits for the answers to requests in flight,
	// which a produce request's timeout bounds.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.kafka.AbortBufferedRecords(ctx); err != nil {
		s.log.Error("could not drop the records Kafka has not acknowledged; some may still be written", "records", n, "err", err)
		return
	}
	s.log.Warn("dropped the records Kafka had not acknowledged; the slot sends them again", "records", n)
}

// opBytes are the decant-op header values, shared by every record.
var opBytes = map[wire.Op][]byte{wire.OpCreate: []byte("c"), wire.OpUpdate: []byte("u"), wire.OpDelete: []byte("d"),
	wire.OpRead: []byte("r"), wire.OpTruncate: []byte("t")}

func (s *Streamer) setFatal(err error) { s.fatal.CompareAndSwap(nil, &err) }

func (s *Streamer) fatalErr() error {
	if p := s.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// maxBufferedBytes bounds the bytes of the records produced but not yet
// acknowledged (keys, values and headers), beside Config.MaxInFlight: at
// the streamer's rate Kafka acknowledges that much in well under a second.
const maxBufferedBytes = 32 << 20
