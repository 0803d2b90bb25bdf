package resolver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/trace"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// maxSeen bounds the per-batch set used to drop duplicate refs produced by
// lookups and truncations; past it, duplicates go through (the build stage
// coalesces them again) and memory stays bounded.
const maxSeen = 100_000

// mapPollBatches is how many BatchSize batches of raw changes one poll of
// the map stage takes at most.
const mapPollBatches = 8

// Mapper is the map stage: it consumes the raw topics of every mapped
// table in the consumer group <Group>.map, resolves each batch of changes
// to the aggregate ids it affects, and produces one ref per id to
// <prefix>.refs.<aggregate>. Create it with NewMapper, run it with Run.
type Mapper struct {
	cfg     Config
	model   *mappings.Model
	db      *pgxpool.Pool
	log     *slog.Logger
	met     *mapMetrics
	planner *planner
	aggs    []*mappings.Aggregate
	topics  []string                      // raw topics consumed
	tables  map[string]mappings.TableName // raw topic → its table

}

// NewMapper validates cfg. It does no I/O. db must carry SessionParams
// (see NewPool).
func NewMapper(cfg Config, model *mappings.Model, db *pgxpool.Pool) (*Mapper, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if model == nil || db == nil {
		return nil, errors.New("resolver: NewMapper needs a model and a database pool")
	}
	aggs, err := selectAggregates(model, cfg.Aggregates)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	tables := map[mappings.TableName]bool{}
	for _, a := range aggs {
		want[a.Name] = true
		for _, r := range a.Routes {
			tables[r.Table] = true
		}
	}
	var topics []string
	byTopic := map[string]mappings.TableName{}
	for t := range tables {
		topic := wire.RawTopic(cfg.TopicPrefix, t.Schema, t.Name)
		topics = append(topics, topic)
		byTopic[topic] = t
	}
	slices.Sort(topics)
	met := newMapMetrics(cfg.Registerer)
	// Every table's and aggregate's series exist from the start, at 0, so
	// rates and alerts over them have something to read before the first
	// event.
	for t := range tables {
		met.changes.WithLabelValues(t.String())
		met.gaps.WithLabelValues(t.String())
		met.dlq.WithLabelValues(t.String())
	}
	for _, a := range aggs {
		met.refs.WithLabelValues(a.Name)
	}
	return &Mapper{
		cfg: cfg, model: model, db: db, aggs: aggs, topics: topics, tables: byTopic,
		log:     cfg.Logger.With("stage", "map", "group", cfg.Group+".map"),
		met:     met,
		planner: &planner{model: model, want: func(a string) bool { return want[a] }},
	}, nil
}

func selectAggregates(model *mappings.Model, names []string) ([]*mappings.Aggregate, error) {
	if len(names) == 0 {
		return model.Aggregates, nil
	}
	var out []*mappings.Aggregate
	for _, n := range names {
		a := model.Aggregate(n)
		if a == nil {
			return nil, fmt.Errorf("resolver: no aggregate %q in the mappings", n)
		}
		out = append(out, a)
	}
	return out, nil
}

// Run consumes and resolves until ctx is cancelled. A failed batch
// (database or Kafka error) is not committed: the session restarts after
// a backoff and consumes it again. Run returns nil on cancellation.
func (m *Mapper) Run(ctx context.Context) error {
	m.log.Info("map stage starting", "topics", len(m.topics), "aggregates", len(m.aggs))
	return runSessions(ctx, m.log, m.session)
}

func (m *Mapper) session(ctx context.Context) error {
	// A session ends on the first failed batch, uncommitted: a snapshot
	// rebuild it planned may never have reached the refs topic, so the
	// next session plans again from the first snapshot row it re-reads.
	m.planner.forget()
	err := beforeJoining(ctx, m.cfg.Kafka, func(adm *kadm.Client) error {
		for _, a := range m.aggs {
			if err := ensureRefsTopic(ctx, adm, &m.cfg, wire.RefsTopic(m.cfg.TopicPrefix, a.Name)); err != nil {
				return err
			}
		}
		// Changes whose old documents cannot be found are dead-lettered.
		if err := ensureTopic(ctx, adm, &m.cfg, wire.DLQTopic(m.cfg.TopicPrefix), wire.DLQTopicConfigs()); err != nil {
			return err
		}
		// Raw topics appear when the streamer first writes to them;
		// creating them here (as the streamer would), before joining,
		// lets the group assign them all in its first generation.
		for _, t := range m.topics {
			if err := ensureTopic(ctx, adm, &m.cfg, t, wire.RawTopicConfigs()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	gaps := newGapTracker()
	cl, err := groupClient(append(append(append([]kgo.Opt{}, m.cfg.Kafka...), producerOpts(m.cfg.MaxBufferedRefs)...), gaps.opts()...), m.cfg.Group+".map", m.topics, m.cfg.SessionTimeout, mapFetchMinBytes)
	if err != nil {
		return err
	}
	defer leaveGroup(cl)
	var total, refs int64
	lastLog := time.Now()
	var started time.Time
	// Several statements' worth: lookups run BatchSize tuples per
	// statement anyway, and a batch's flush and offset commit are then
	// paid once per mapPollBatches statements under a backlog (an
	// initial snapshot's 1.3 M rows took 2,600 commits).
	return consume(ctx, cl, m.met.gens, mapPollBatches*m.cfg.BatchSize,
		func(recs []*kgo.Record) (int64, error) {
			started = time.Now()
			defer trace.StartRegion(ctx, "map batch").End()
			return m.handle(ctx, cl, gaps, recs)
		},
		func(recs []*kgo.Record, n int64) {
			m.met.batches.Observe(time.Since(started).Seconds())
			total += int64(len(recs))
			refs += n
			if time.Since(lastLog) > 10*time.Second {
				m.log.Info("map progress", "records", total, "refs", refs)
				lastLog = time.Now()
			}
		})
}

// handle resolves one batch and produces its refs; it returns once Kafka
// acknowledged every one of them, with their number.
func (m *Mapper) handle(ctx context.Context, cl *kgo.Client, gaps *gapTracker, recs []*kgo.Record) (int64, error) {
	changes := make([]*wire.Change, 0, len(recs))
	holes, err := gaps.check(recs, cl.CommittedOffsets, func(topics []string) (map[string]map[int32]int64, error) {
		return logStartOffsets(ctx, kadm.NewClient(cl), topics)
	})
	if err != nil {
		return 0, err
	}
	for topic, g := range holes {
		if ch := m.compactedAway(topic, g); ch != nil {
			changes = append(changes, ch)
		}
	}
	skipped := map[mappings.TableName]int{}
	var bad []badRecord
	for _, r := range recs {
		if r.Value == nil {
			continue // tombstone after a delete
		}
		if table, ok := m.tables[r.Topic]; ok && m.snapshotPlanned(table, r) {
			// A row of an initial snapshot whose aggregates are already
			// being rebuilt whole: nothing to resolve, so nothing to
			// decode (decoding 1.3 M snapshot rows was half the CPU of
			// an initial load).
			skipped[table]++
			continue
		}
		ch := new(wire.Change)
		if err := wire.DecodeChange(r.Value, ch); err != nil {
			bad = append(bad, badRecord{r, err})
			continue
		}
		changes = append(changes, ch)
		m.met.changes.WithLabelValues(ch.Schema + "." + ch.Table).Inc()
	}
	p, err := m.planner.plan(changes)
	if err != nil {
		return 0, err
	}
	nskipped := 0
	for t, n := range skipped { // counted per batch: this runs for every snapshot row
		m.met.changes.WithLabelValues(t.String()).Add(float64(n))
		nskipped += n
	}
	m.met.skipped.Add(float64(p.skipped + nskipped))
	out := &refWriter{cl: cl, prefix: m.cfg.TopicPrefix, seen: map[string]struct{}{}, met: m.met}
	m.deadLetterNoBefore(ctx, cl, p.noBefore, &out.acks)
	deadLetterBad(ctx, cl, m.log, m.cfg.TopicPrefix, wire.StageMap, bad, &out.acks)
	m.met.bad.Add(float64(len(bad)))
	for _, kr := range p.direct.refs {
		if err := out.produce(ctx, kr.Aggregate, kr.Key, kr.Ref); err != nil {
			return 0, err
		}
	}
	if len(p.lookups) > 0 || len(p.truncated) > 0 {
		if err := m.resolveInDB(ctx, p, out); err != nil {
			return 0, err
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, fmt.Errorf("flush refs: %w", err)
	}
	if err := out.acks.first(); err != nil {
		return 0, err
	}
	return out.n, nil
}

// compactedAway reports a hole in a raw topic (see gapTracker) and
// returns the change that repairs it: a TRUNCATE of the topic's table, so
// that every document of the aggregates using it is rebuilt (and, for a
// root table, every id with a document: a delete may be what was lost).
func (m *Mapper) compactedAway(topic string, g gap) *wire.Change {
	table, ok := m.tables[topic]
	if !ok {
		return nil
	}
	lsn := "0/0"
	for _, h := range g.first.Headers {
		if h.Key == wire.HeaderLSN {
			lsn = string(h.Value)
		}
	}
	m.met.gaps.WithLabelValues(table.String()).Inc()
	m.log.Warn("records of a raw topic were compacted away before the map stage read them (it lagged more than the topic's min.compaction.lag.ms); rebuilding every document of the aggregates using the table",
		"topic", topic, "partition", g.partition, "offsets", fmt.Sprintf("%d-%d", g.from, g.to-1), "table", table.String())
	return &wire.Change{Op: wire.OpTruncate, Schema: table.Schema, Table: table.Name, Source: wire.Source{LSN: lsn, CommitLSN: lsn}}
}

// snapshotPlanned says, from the record's headers alone, whether r is a
// row of an initial snapshot whose every aggregate the planner already
// rebuilds whole for that snapshot (see planner.snapshots).
func (m *Mapper) snapshotPlanned(table mappings.TableName, r *kgo.Record) bool {
	var op, lsn []byte
	for _, h := range r.Headers {
		switch h.Key {
		case wire.HeaderOp:
			op = h.Value
		case wire.HeaderLSN:
			lsn = h.Value
		}
	}
	if string(op) != string(wire.OpRead) || len(lsn) == 0 {
		return false
	}
	return m.planner.snapshotPlanned(table, lsn)
}

// resolveInDB runs the batch's lookups and truncation rebuilds in one
// snapshot in which every transaction of the batch is visible.
func (m *Mapper) resolveInDB(ctx context.Context, p *plan, out *refWriter) error {
	conn, err := m.db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	snap, err := openSnapshot(ctx, conn, p.xids, m.cfg.VisibilityTimeout)
	if err != nil {
		return err
	}
	defer snap.tx.Rollback(context.Background()) //nolint:errcheck // read-only
	for _, lb := range p.lookups {
		if err := m.lookup(ctx, snap, lb, out); err != nil {
			return mappingBroken("map", lb.route.Aggregate, err)
		}
	}
	for _, tr := range p.truncated {
		a := tr.aggregate
		ref := withAggregate(tr.cause.ref, a.Name)
		why := "table truncated"
		if ref.Op == wire.OpRead {
			why = "initial snapshot"
		}
		m.log.Info(why+": rebuilding every document", "aggregate", a.Name, "table", ref.Table, "lsn", ref.CommitLSN, "root", tr.root)
		produce := func(key []byte) error { return out.produce(ctx, a.Name, key, ref) }
		if tr.root {
			// Documents whose roots are gone: every id that has one, and
			// every id that may be about to get one — a build whose
			// snapshot predates the truncation may write its document
			// after the aggregate topic is read, but its ref is in the
			// (compacted) refs topic already, and the build of this ref,
			// later in the same partition, writes after it. Of the ids
			// read there, those with a root row in this snapshot are
			// left to rootIDs below, which produces each once: produced
			// from both, the seen-set dropped the second copy only up to
			// its bound (maxSeen), and a second initial snapshot of
			// 200,000 documents built 100,000 of them twice. Both topics
			// are read before the root ids are produced, so the refs
			// topic does not hold this batch's own refs yet.
			orphans := &rootless{ctx: ctx, tx: snap.tx, a: a, produce: produce}
			for _, topic := range []string{wire.AggTopic(m.cfg.TopicPrefix, a.Name), wire.RefsTopic(m.cfg.TopicPrefix, a.Name)} {
				if err := scanKeys(ctx, m.cfg.Kafka, topic, orphans.add); err != nil {
					return fmt.Errorf("aggregate %s: read document ids from %s: %w", a.Name, topic, err)
				}
			}
			if err := orphans.flush(); err != nil {
				return mappingBroken("map", a.Name, err)
			}
		}
		if err := rootIDs(ctx, snap.tx, a, 10_000, produce); err != nil {
			return mappingBroken("map", a.Name, err)
		}
	}
	return nil
}

// lookup runs one route's lookup for the batch's From tuples, BatchSize
// tuples per statement, producing refs as rows stream in.
func (m *Mapper) lookup(ctx context.Context, snap *snapshot, lb *lookupBatch, out *refWriter) error {
	r := lb.route
	a := m.model.Aggregate(r.Aggregate)
	ref := withAggregate(lb.cause.ref, a.Name)
	n := len(a.ID)
	for chunk := range slices.Chunk(lb.tuples, m.cfg.BatchSize) {
		started := time.Now()
		args, err := r.Lookup.Args(chunk)
		if err != nil {
			return fmt.Errorf("aggregate %s, route %s: %w", a.Name, r.Path, err)
		}
		rows, err := snap.tx.Query(ctx, r.Lookup.SQL, args...)
		if err != nil {
			return fmt.Errorf("aggregate %s, route %s: lookup: %w", a.Name, r.Path, err)
		}
		vals := make([][]byte, n)
		dest := make([]any, n)
		for i := range vals {
			dest[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return fmt.Errorf("aggregate %s, route %s: lookup: %w", a.Name, r.Path, err)
			}
			raw := make([]json.RawMessage, n)
			for i := range vals {
				raw[i] = append(json.RawMessage(nil), vals[i]...)
			}
			if err := out.produce(ctx, a.Name, idKey(a, raw), ref); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("aggregate %s, route %s: lookup: %w", a.Name, r.Path, err)
		}
		m.met.lookups.Observe(time.Since(started).Seconds())
	}
	return nil
}

// refWriter produces refs of one batch, dropping duplicates while its
// bounded seen-set has room. Produce blocks when the client buffers
// MaxBufferedRefs unacknowledged records.
type refWriter struct {
	cl     *kgo.Client
	prefix string
	seen   map[string]struct{}
	acks   acks
	n      int64
	met    *mapMetrics
}

func (w *refWriter) produce(ctx context.Context, aggregate string, key []byte, ref wire.Ref) error {
	k := aggregate + "\x00" + string(key)
	if _, dup := w.seen[k]; dup {
		return nil
	}
	if len(w.seen) < maxSeen {
		w.seen[k] = struct{}{}
	}
	if err := w.acks.first(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	value, err := json.Marshal(ref)
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: wire.RefsTopic(w.prefix, aggregate), Key: key, Value: value,
		Headers: []kgo.RecordHeader{{Key: wire.HeaderLSN, Value: []byte(ref.CommitLSN)}}}
	w.cl.Produce(ctx, rec, w.acks.promise)
	w.n++
	w.met.refs.WithLabelValues(aggregate).Inc()
	return nil
}

// deadLetterNoBefore writes the batch's changes that lack their before
// image to <prefix>.dlq (acknowledged with the batch's refs, through a) and
// logs one line per table: the documents these rows belonged to before the
// change cannot be found, so they may keep the rows until a backfill.
func (m *Mapper) deadLetterNoBefore(ctx context.Context, cl *kgo.Client, dead []noBefore, a *acks) {
	type tableSummary struct {
		n          int
		first      *noBefore
		aggregates []string
	}
	byTable := map[mappings.TableName]*tableSummary{}
	var order []mappings.TableName
	for i := range dead {
		d := &dead[i]
		s := byTable[d.table]
		if s == nil {
			s = &tableSummary{first: d}
			byTable[d.table] = s
			order = append(order, d.table)
		}
		s.n++
		for _, ag := range d.aggregates {
			if !slices.Contains(s.aggregates, ag) {
				s.aggregates = append(s.aggregates, ag)
			}
		}
		key, value := wire.DeadLetter{Stage: wire.StageMap, Table: d.table.String(), Op: d.change.Op, Key: d.change.Key,
			LSN: d.change.Source.LSN, CommitLSN: d.change.Source.CommitLSN, Aggregates: d.aggregates, Missing: d.columns,
			Reason: noBeforeReason(d.table, d.columns, d.aggregates)}.Encode()
		cl.Produce(ctx, &kgo.Record{Topic: wire.DLQTopic(m.cfg.TopicPrefix), Key: key, Value: value,
			Headers: []kgo.RecordHeader{{Key: wire.HeaderLSN, Value: []byte(d.change.Source.CommitLSN)}, {Key: wire.HeaderOp, Value: []byte(d.change.Op)}}},
			a.promise)
		m.met.dlq.WithLabelValues(d.table.String()).Inc()
	}
	for _, tn := range order {
		s := byTable[tn]
		m.log.Error("changes without the before image the mappings need; written to the dead-letter topic",
			"table", tn.String(), "changes", s.n, "lsn", s.first.change.Source.LSN, "missing", s.first.columns,
			"fix", noBeforeFix(tn, s.aggregates))
	}
}

// noBeforeReason is the reason of a dead-lettered change without its before image.
func noBeforeReason(tn mappings.TableName, missing, aggregates []string) string {
	return fmt.Sprintf("the before image of this change lacks %v (the replica identity of %s is not FULL): the documents the row belonged to before the change cannot be found and may still contain it; fix: %s",
		missing, tn, noBeforeFix(tn, aggregates))
}

func noBeforeFix(tn mappings.TableName, aggregates []string) string {
	fix := "ALTER TABLE " + tn.Sanitize() + " REPLICA IDENTITY FULL; then"
	for i, a := range aggregates {
		if i > 0 {
			fix += " and"
		}
		fix += " decant backfill " + a
	}
	return fix
}
