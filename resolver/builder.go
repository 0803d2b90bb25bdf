package resolver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/fence"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// Builder is the build stage: it consumes <prefix>.refs.<aggregate> in the
// consumer group <Group>.build, builds the documents of each batch of ids
// with the aggregate's Build statement, hands them to the Sink and only
// then commits the refs' offsets. Create it with NewBuilder, run it with Run.
type Builder struct {
	cfg     Config
	model   *mappings.Model
	db      *pgxpool.Pool
	sink    Sink
	log     *slog.Logger
	met     *buildMetrics
	aggs    []*mappings.Aggregate
	byTopic map[string]*mappings.Aggregate
	sizes   *docSizes // of the documents built so far: bounds the refs in flight
	// writing counts the groups of documents being written, over every
	// batch in flight: none means the sinks wait for the build stage
	// (buildAndWrite). idle, when not nil, is closed when it falls to 0.
	writing atomic.Int32
	idleMu  sync.Mutex
	idle    chan struct{}
}

// idleSignal returns a channel closed once no group is being written.
func (b *Builder) idleSignal() <-chan struct{} {
	b.idleMu.Lock()
	defer b.idleMu.Unlock()
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	return b.idle
}

// writeDone ends a group's write (writing), and signals when it was the
// last one.
func (b *Builder) writeDone() {
	if b.writing.Add(-1) != 0 {
		return
	}
	b.idleMu.Lock()
	defer b.idleMu.Unlock()
	if b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
}

// NewBuilder validates cfg. It does no I/O. db must carry SessionParams
// (see NewPool); sink receives every built document (use Sinks for several).
func NewBuilder(cfg Config, model *mappings.Model, db *pgxpool.Pool, sink Sink) (*Builder, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if model == nil || db == nil || sink == nil {
		return nil, errors.New("resolver: NewBuilder needs a model, a database pool and a sink")
	}
	aggs, err := selectAggregates(model, cfg.Aggregates)
	if err != nil {
		return nil, err
	}
	b := &Builder{cfg: cfg, model: model, db: db, sink: sink, aggs: aggs, byTopic: map[string]*mappings.Aggregate{}, sizes: newDocSizes(),
		log: cfg.Logger.With("stage", "build", "group", cfg.Group+".build"), met: newBuildMetrics(cfg.Registerer)}
	for _, a := range aggs {
		b.byTopic[wire.RefsTopic(cfg.TopicPrefix, a.Name)] = a
		// The aggregate's series exist from the start, at 0.
		b.met.refs.WithLabelValues(a.Name)
		b.met.docs.WithLabelValues(a.Name, "built")
		b.met.docs.WithLabelValues(a.Name, "deleted")
	}
	return b, nil
}

// Run consumes refs and builds documents until ctx is cancelled. A batch
// that fails (database, sink or Kafka error, transactions not visible in
// time) is not committed: the session restarts and builds it again.
func (b *Builder) Run(ctx context.Context) error {
	b.log.Info("build stage starting", "aggregates", len(b.aggs))
	return runSessions(ctx, b.log, b.session)
}

func (b *Builder) session(ctx context.Context) error {
	topics := make([]string, 0, len(b.byTopic))
	for t := range b.byTopic {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	// A rebalance that must revoke partitions waits for the batches in
	// flight (BlockRebalanceOnPoll); franz-go says when one does.
	wanted := new(atomic.Bool)
	opts := []kgo.Opt{kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { wanted.Store(true) })}
	group := b.cfg.Group + ".build"
	var f *fence.Fence
	if fs := fencerOf(b.sink); fs != nil && !b.cfg.Unfenced {
		f = fence.New(fenceLease(b.cfg.SessionTimeout))
		opts = append(opts, fenceOpts(f, fs, group, b.log)...)
		defer f.Close()
		ctx = fence.With(ctx, f)
	}
	err := beforeJoining(ctx, b.cfg.Kafka, func(adm *kadm.Client) error {
		for _, t := range topics {
			if err := ensureRefsTopic(ctx, adm, &b.cfg, t); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	cl, err := groupClient(append(opts, b.cfg.Kafka...), group, topics, b.cfg.SessionTimeout, buildFetchMinBytes)
	if err != nil {
		return err
	}
	defer leaveGroup(cl)
	if f != nil {
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		go keepLease(lctx, cl, f, group, fenceLease(b.cfg.SessionTimeout)/5)
	}
	return b.pipeline(ctx, cl, wanted)
}

// pipeline polls refs and builds them until ctx ends or a batch fails.
//
// Up to maxInFlight polled batches (maxPollsInFlight polls' worth of refs)
// are in flight at once: the next one is polled and built while the
// documents of the previous ones are still being written, so that PostgreSQL and the sinks do not idle at every
// batch boundary, and so that a slow sink (Elasticsearch, minutes of
// retries) does not hold back the aggregate topic, which the next batches
// keep writing while the older ones wait (the Elasticsearch sink bounds
// its own requests in flight). Offsets are still committed in poll
// order, each batch once the sinks accepted all of its documents. The keys
// of a batch that an earlier batch in flight still writes are built once
// that batch wrote the aggregate topics and written to the other sinks
// once it is done, while the rest of the batch goes ahead (batch.later):
// the newer build of a key writes last to every sink.
// Rebalances are allowed only with nothing in flight: whenever nothing is,
// and when a rebalance waits for this member (rebalanceWanted, set by
// franz-go's OnPartitionsCallbackBlocked), by waiting for every batch in
// flight. A sink held for long holds a rebalance as long, not the
// aggregate topic.
func (b *Builder) pipeline(ctx context.Context, cl *kgo.Client, rebalanceWanted *atomic.Bool) (err error) {
	bctx, cancel := context.WithCancel(ctx)
	var inflight []*batch // oldest first
	defer func() {
		cancel()
		for _, bt := range inflight {
			<-bt.done
		}
		b.met.setInFlight(nil)
	}()
	var refs, docs int64
	var commits asyncCommits
	defer commits.waitInto(&err)
	lastLog := time.Now()
	// commitOldest waits for the oldest batch in flight and commits it.
	commitOldest := func() error {
		bt := inflight[0]
		inflight = inflight[1:]
		region := trace.StartRegion(ctx, "build wait for oldest batch")
		<-bt.done
		region.End()
		if bt.err != nil {
			if errors.Is(bt.err, errNotVisible) {
				b.met.invisible.Inc()
			}
			return bt.err
		}
		if err := commits.failed(); err != nil {
			return err
		}
		commits.commit(ctx, cl, bt.recs)
		b.met.setInFlight(inflight)
		refs += int64(len(bt.recs))
		docs += bt.n
		if time.Since(lastLog) > 10*time.Second {
			b.log.Info("build progress", "refs", refs, "documents", docs)
			lastLog = time.Now()
		}
		return nil
	}
	// commitUpTo waits for the oldest n batches in flight and commits
	// them, then commits, in order, those after them that are done.
	commitUpTo := func(n int) error {
		for ; n > 0; n-- {
			if err := commitOldest(); err != nil {
				return err
			}
		}
		for len(inflight) > 0 && inflight[0].finished() {
			if err := commitOldest(); err != nil {
				return err
			}
		}
		return nil
	}
	drain := func() error {
		if err := commitUpTo(len(inflight)); err != nil {
			return err
		}
		cl.AllowRebalance()
		return nil
	}
	for {
		// Room for one more poll: at most maxInFlight batches and
		// maxPollsInFlight polls' worth of refs (batches are as small as
		// the rate makes them, so under a trickle more of them may wait
		// for a slow sink while the aggregate topic stays fresh).
		// Fewer when their documents would exceed MaxInFlightBytes
		// (docsize.go).
		pollMax := pollChunks * b.cfg.BatchSize * b.cfg.Workers
		limit, known := b.sizes.refsLimit(maxPollsInFlight*pollMax, b.cfg.MaxInFlightBytes, b.cfg.Workers)
		b.met.refsLimit.Set(float64(limit))
		next := min(pollMax, limit)
		queued := 0
		for _, bt := range inflight {
			queued += len(bt.recs)
		}
		wait := 0
		for ; wait < len(inflight) && (len(inflight)-wait > maxInFlight-1 || queued+next > limit); wait++ {
			queued -= len(inflight[wait].recs)
		}
		if wait > 0 && !known {
			// The limit is one ref per worker until a document's size is
			// known: wait for the oldest batch or for that, then look
			// again (a sink may hold the oldest batch for long, and its
			// documents are built).
			select {
			case <-inflight[0].done:
			case <-b.sizes.ready:
			case <-ctx.Done():
				return nil
			}
			if err := commitUpTo(0); err != nil {
				return err
			}
			continue
		}
		if err := commitUpTo(wait); err != nil {
			return err
		}
		if rebalanceWanted.Swap(false) || len(inflight) == 0 {
			if err := drain(); err != nil {
				return err
			}
		}
		// Up to pollChunks chunks per worker: under a backlog a batch's
		// fixed costs (offset commit, poll) are paid once per 8 chunks a
		// worker. While batches are in flight the poll also returns when
		// the oldest is done, so that its offsets are committed at once.
		pctx, stop := ctx, context.CancelFunc(func() {})
		if len(inflight) > 0 {
			pctx, stop = context.WithCancel(ctx)
			go func(done <-chan struct{}) {
				select {
				case <-done:
					stop()
				case <-pctx.Done():
				}
			}(inflight[0].done)
		}
		region := trace.StartRegion(ctx, "build poll")
		recs, ended, err := poll(ctx, pctx, cl, next)
		region.End()
		cut := pctx.Err() != nil
		stop()
		if ended || err != nil {
			return err
		}
		b.met.gens.observe(cl)
		if len(recs) == 0 {
			if cut {
				continue // the oldest batch is done: commit it and poll on
			}
			if err := drain(); err != nil {
				return err
			}
			continue
		}
		cur := b.plan(recs)
		if err := b.deadLetterBad(ctx, cl, cur.bad); err != nil {
			return err
		}
		cur.holdKeysOf(inflight)
		go b.run(bctx, cur)
		inflight = append(inflight, cur)
		b.met.setInFlight(inflight)
	}
}

// deadLetterBad writes the refs of a batch that cannot be read to the
// dead-letter topic and waits for their acknowledgement, before the
// batch's offsets can be committed.
func (b *Builder) deadLetterBad(ctx context.Context, cl *kgo.Client, bad []badRecord) error {
	if len(bad) == 0 {
		return nil
	}
	var a acks
	deadLetterBad(ctx, cl, b.log, b.cfg.TopicPrefix, wire.StageBuild, bad, &a)
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush dead letters: %w", err)
	}
	b.met.bad.Add(float64(len(bad)))
	return a.first()
}

// maxInFlight is how many polled batches the build stage has in flight
// at most, and maxPollsInFlight how many full polls' worth of refs
// (pollChunks × BatchSize × Workers each) they hold together: under a
// backlog batches are full and 4 are in flight; at a steady rate they
// are small (a poll every few hundred milliseconds), and up to 64 may
// wait for a slow sink: with 16, an Elasticsearch pause of 4 s (a merge,
// a refresh of updated nested documents) at 1,200 changes/s filled them,
// the next poll waited for the oldest, and the aggregate topic's p99 was
// 2.6 s instead of about 100 ms.
const (
	maxInFlight      = 64
	maxPollsInFlight = 4
)

// batch is one polled batch of refs: its chunks to build, the keys they
// name, and once done is closed, the documents written or the error.
type batch struct {
	recs   []*kgo.Record
	chunks []chunk
	// later are the chunks of keys an earlier batch in flight still
	// writes: they are built once every batch in after has written the
	// aggregate topics (logged), and written to the other sinks once
	// every such batch is done, so that the newer build of a key writes
	// last to every sink, while a slow sink (Elasticsearch) holds back
	// only its own writes, not the aggregate topics.
	later []chunk
	after []*batch
	keys  map[string]struct{} // batchKey of each ref
	bad   []badRecord         // refs that cannot be read, for the dead-letter topic
	// logged is closed once every document of the batch is written to the
	// log sinks (Sinks.writeInPhases), or the batch ended; done once it
	// ended.
	logged chan struct{}
	done   chan struct{}
	n      int64
	err    error
}

// batchKey names a ref's key in batch.keys: its refs topic and key.
func batchKey(topic string, key []byte) string { return topic + "\x00" + string(key) }

// holdKeysOf moves the keys of bt that a batch of inflight (all polled before
// bt) also builds into bt.later, to be built after those batches.
func (bt *batch) holdKeysOf(inflight []*batch) {
	var chunks []chunk
	for _, c := range bt.chunks {
		free := chunk{agg: c.agg, topic: c.topic, xids: c.xids, writers: c.writers}
		held := chunk{agg: c.agg, topic: c.topic, xids: c.xids, writers: c.writers} // the chunk's xids and writers: a superset is harmless
		for _, key := range c.keys {
			k := batchKey(c.topic, key)
			owned := false
			for _, prev := range inflight {
				if _, ok := prev.keys[k]; ok {
					owned = true
					if !slices.Contains(bt.after, prev) {
						bt.after = append(bt.after, prev)
					}
				}
			}
			if owned {
				held.keys = append(held.keys, key)
			} else {
				free.keys = append(free.keys, key)
			}
		}
		if len(free.keys) > 0 {
			chunks = append(chunks, free)
		}
		if len(held.keys) > 0 {
			bt.later = append(bt.later, held)
		}
	}
	bt.chunks = chunks
}

// finished says whether bt is done, without waiting.
func (bt *batch) finished() bool {
	select {
	case <-bt.done:
		return true
	default:
		return false
	}
}

// run builds and writes bt, then closes bt.logged and bt.done.
// The keys an earlier batch in flight still writes are built once every
// such batch has written the log sinks and written to the other sinks once
// every such batch is done, while the rest of bt goes ahead.
func (b *Builder) run(ctx context.Context, bt *batch) {
	var loggedOnce sync.Once
	closeLogged := func() { loggedOnce.Do(func() { close(bt.logged) }) }
	defer close(bt.done)
	defer closeLogged()
	if len(bt.later) == 0 {
		bt.n, bt.err = b.buildAndWrite(ctx, bt.chunks, closeLogged, nil)
		return
	}
	var now int64
	var nowErr error
	first := make(chan struct{})
	nowLogged := make(chan struct{})
	go func() {
		defer close(first)
		now, nowErr = b.buildAndWrite(ctx, bt.chunks, func() { close(nowLogged) }, nil)
	}()
	wait := func(ready func(*batch) <-chan struct{}) error {
		for _, prev := range bt.after {
			select {
			case <-ready(prev):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	later, laterErr := int64(0), wait(func(prev *batch) <-chan struct{} { return prev.logged })
	if laterErr == nil {
		gate := func() error { return wait(func(prev *batch) <-chan struct{} { return prev.done }) }
		later, laterErr = b.buildAndWrite(ctx, bt.later, func() {
			select {
			case <-nowLogged:
			case <-first:
			}
			closeLogged()
		}, gate)
	}
	<-first
	bt.n, bt.err = now+later, cmp.Or(nowErr, laterErr)
}

// pollChunks is how many chunks of BatchSize ids per worker one poll of
// the build stage takes at most.
const pollChunks = 8

// work is the coalesced refs of one partition of one polled batch.
type work struct {
	agg   *mappings.Aggregate
	topic string
	keys  *coalesced
}

// coalesced holds distinct keys in first-seen order and the distinct xids
// of the refs that named them.
type coalesced struct {
	index map[string]bool
	keys  [][]byte
	xids  map[string][]uint32 // key → xids (deduplicated)
}

func newCoalesced() *coalesced {
	return &coalesced{index: map[string]bool{}, xids: map[string][]uint32{}}
}

func (c *coalesced) add(key []byte, ref wire.Ref) {
	k := string(key)
	if !c.index[k] {
		c.index[k] = true
		c.keys = append(c.keys, key)
	}
	if ref.XID != 0 && !slices.Contains(c.xids[k], ref.XID) {
		c.xids[k] = append(c.xids[k], ref.XID)
	}
}

// appendXids appends to out the xids of key's refs that out lacks.
func (c *coalesced) appendXids(out []uint32, key []byte) []uint32 {
	for _, x := range c.xids[string(key)] {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// plan cuts one polled batch into chunks. Refs of a key all land on one
// partition, so once each partition's refs are coalesced every key of the
// batch is distinct: the batch is cut into chunks of at most BatchSize keys
// of one aggregate, which Workers build and write in any order, keeping
// PostgreSQL and the sinks busy until the last chunk (a partition with more
// refs than the others does not hold the batch up alone). Only once the
// sink accepted every document may the batch's offsets be committed.
func (b *Builder) plan(recs []*kgo.Record) *batch {
	bt := &batch{recs: recs, keys: make(map[string]struct{}, len(recs)), logged: make(chan struct{}), done: make(chan struct{})}
	type tp struct {
		topic string
		part  int32
	}
	byPart := map[tp]*work{}
	var order []tp
	// Consecutive refs often carry the same value (every ref of a
	// backfill does, and the refs of one transaction): decoded once.
	var lastValue []byte
	var lastRef wire.Ref
	refs := map[*mappings.Aggregate]int{} // counted once per batch: a labelled counter is a lookup
	defer func() {
		for a, n := range refs {
			b.met.refs.WithLabelValues(a.Name).Add(float64(n))
		}
	}()
	for _, r := range recs {
		a := b.byTopic[r.Topic]
		if a == nil || r.Value == nil {
			continue
		}
		// A key is checked once per batch: refs of one id repeat under load.
		bk := batchKey(r.Topic, r.Key)
		if _, seen := bt.keys[bk]; !seen {
			if _, err := parseKey(a, r.Key); err != nil {
				bt.bad = append(bt.bad, badRecord{r, err}) // no build can ever succeed for it
				continue
			}
		}
		var ref wire.Ref
		if lastValue != nil && bytes.Equal(r.Value, lastValue) {
			ref = lastRef
		} else if err := wire.DecodeRef(r.Value, &ref); err != nil {
			// The key alone says what to build: build it, and say so.
			bt.bad = append(bt.bad, badRecord{r, fmt.Errorf("refs record is not a ref (its key is built anyway): %w", err)})
		} else {
			lastValue, lastRef = r.Value, ref
		}
		refs[a]++
		k := tp{r.Topic, r.Partition}
		w := byPart[k]
		if w == nil {
			w = &work{agg: a, topic: r.Topic, keys: newCoalesced()}
			byPart[k] = w
			order = append(order, k)
		}
		w.keys.add(r.Key, ref)
		bt.keys[bk] = struct{}{}
	}
	// Chunks of one aggregate, filled across its partitions.
	var chunks []chunk
	byAgg := map[*mappings.Aggregate]int{} // → index of its last, unfilled chunk
	for _, k := range order {
		w := byPart[k]
		writer := fence.WriterID(k.topic, k.part)
		for _, key := range w.keys.keys {
			i, ok := byAgg[w.agg]
			if !ok || len(chunks[i].keys) == b.cfg.BatchSize {
				i = len(chunks)
				chunks = append(chunks, chunk{agg: w.agg, topic: w.topic, writers: make(map[string]string, min(b.cfg.BatchSize, len(w.keys.keys)))})
				byAgg[w.agg] = i
			}
			c := &chunks[i]
			c.keys = append(c.keys, key)
			c.xids = w.keys.appendXids(c.xids, key)
			if vals, err := parseKey(w.agg, key); err == nil { // checked above
				c.writers[string(idKey(w.agg, vals))] = writer
			}
		}
	}
	bt.chunks = chunks
	return bt
}

// buildAndWrite builds chunks on Workers connections and hands the
// documents to the sink in groups of about WriteBytes, at most Workers
// writes in flight, while the next chunks are built: PostgreSQL and the
// sinks work at the same time, and Elasticsearch gets bulk requests of
// the size it indexes fastest rather than one per chunk (requests of
// 500 documents, about 650 kB, indexed at half the rate of 5 MB ones). A
// group is written when it is full, when every chunk is built (a lone
// change is not held back), or as soon as no group of any batch is being
// written, on a chunk's arrival or a write's end: the sinks would
// otherwise wait, idle, for a group to fill (a backlog's first 5 MiB took
// 0.3 s to build), and while one goes out the next fills. It calls
// logged (when not nil) once every document is written to the log sinks,
// and each write waits for gate (when not nil) before the other sinks
// (Sinks.writeInPhases). It returns the number of documents the sink
// accepted, or the first error.
func (b *Builder) buildAndWrite(ctx context.Context, chunks []chunk, logged func(), gate func() error) (int64, error) {
	var (
		builders, writers sync.WaitGroup
		logging           sync.WaitGroup // writes not yet accepted by the log sinks
		mu                sync.Mutex
		first             error
		n                 int64
		next              = make(chan chunk)
		built             = make(chan []wire.Document, b.cfg.Workers)
		writing           = make(chan struct{}, b.cfg.Workers)
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
		}
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	for range min(b.cfg.Workers, len(chunks)) {
		builders.Add(1)
		go func() {
			defer builders.Done()
			for c := range next {
				if failed() {
					continue
				}
				docs, err := b.buildChunk(ctx, c)
				if err != nil {
					fail(err)
					continue
				}
				built <- docs
			}
		}()
	}
	go func() {
		for _, c := range chunks {
			if failed() {
				break
			}
			next <- c
		}
		close(next)
		builders.Wait()
		close(built)
	}()
	var group []wire.Document
	size := 0
	// Groups are about as long as the last one: sized once rather than
	// grown chunk by chunk (the growth was most of what this loop
	// allocated).
	last := 0
	flush := func() {
		docs := group
		last = len(group)
		group, size = nil, 0
		if failed() {
			return
		}
		writing <- struct{}{}
		writers.Add(1)
		logging.Add(1)
		b.writing.Add(1)
		go func() {
			var once sync.Once
			accepted := func() { once.Do(logging.Done) }
			defer func() { accepted(); b.writeDone(); <-writing; writers.Done() }()
			if err := b.write(ctx, docs, accepted, gate); err != nil {
				fail(err)
				return
			}
			mu.Lock()
			n += int64(len(docs))
			mu.Unlock()
		}()
	}
	for {
		var idle <-chan struct{}
		if len(group) > 0 {
			if b.writing.Load() == 0 {
				flush()
				continue
			}
			// Taken before the count is read again: a write ending
			// after that read closes this channel.
			idle = b.idleSignal()
			if b.writing.Load() == 0 {
				continue
			}
		}
		var docs []wire.Document
		ok := true
		select {
		case docs, ok = <-built:
		case <-idle:
			continue
		}
		if !ok {
			break
		}
		if group == nil {
			group = make([]wire.Document, 0, max(last, len(docs)))
		}
		group = append(group, docs...)
		for i := range docs {
			size += docBytes(&docs[i])
		}
		if size >= b.cfg.WriteBytes {
			flush()
		}
	}
	if len(group) > 0 {
		flush()
	}
	logging.Wait()
	if logged != nil && !failed() {
		logged()
	}
	writers.Wait()
	return n, first
}

// chunk is at most BatchSize distinct keys of one aggregate, built by one
// statement, with the xids of their refs.
type chunk struct {
	agg   *mappings.Aggregate
	topic string // the refs topic the keys came from
	keys  [][]byte
	xids  []uint32
	// writers names, by document id (canonical key), the writer of the
	// refs partition the key came from (fence.WriterID).
	writers map[string]string
}

// buildChunk builds the documents of one chunk.
func (b *Builder) buildChunk(ctx context.Context, c chunk) ([]wire.Document, error) {
	defer trace.StartRegion(ctx, "build statement").End()
	started := time.Now()
	docs, err := build(ctx, b.db, c.agg, c.keys, c.xids, b.cfg.VisibilityTimeout, b.log)
	if err != nil {
		return nil, mappingBroken("build", c.agg.Name, err)
	}
	b.met.statements.Observe(time.Since(started).Seconds())
	b.sizes.observe(docs)
	for i := range docs {
		// A built id that no ref named (its encoding differs from the
		// requested key's) goes with the chunk's first key: a member that
		// lost its partitions is fenced by any of them.
		docs[i].Writer = cmp.Or(c.writers[string(docs[i].ID)], c.firstWriter())
	}
	return docs, nil
}

// firstWriter is the writer of some key of c ("" when c has none).
func (c chunk) firstWriter() string {
	for _, w := range c.writers {
		return w
	}
	return ""
}

// write hands documents, of one or several aggregates, to the sink, in
// phases (Sinks.writeInPhases): logged is called once the log sinks
// accepted them, and the other sinks are written once gate returned. The
// time spent waiting for gate (an earlier build of a key, still being
// written) is not the sinks' and is left out of the write's duration.
func (b *Builder) write(ctx context.Context, docs []wire.Document, logged func(), gate func() error) error {
	stopBeforeWrite(b.log, docs)
	var waited time.Duration
	if gate != nil {
		inner := gate
		gate = func() error {
			t := time.Now()
			defer func() { waited = time.Since(t) }()
			return inner()
		}
	}
	started := time.Now()
	if err := writeInPhases(ctx, b.sink, docs, logged, gate); err != nil {
		return fmt.Errorf("aggregate %s: sink: %w", docs[0].Aggregate, err)
	}
	b.met.writes.Observe((time.Since(started) - waited).Seconds())
	for i := 0; i < len(docs); {
		agg, built, deleted := docs[i].Aggregate, 0, 0
		for ; i < len(docs) && docs[i].Aggregate == agg; i++ {
			if docs[i].Deleted {
				deleted++
			} else {
				built++
			}
		}
		b.met.docs.WithLabelValues(agg, "deleted").Add(float64(deleted))
		b.met.docs.WithLabelValues(agg, "built").Add(float64(built))
	}
	return nil
}

// parseKey returns the id values of an aggregate key ({"id":7}) in id order.
func parseKey(a *mappings.Aggregate, key []byte) ([]json.RawMessage, error) {
	if vals, ok := parseFlatKey(a, key); ok {
		return vals, nil
	}
	return parseKeyJSON(a, key)
}

// parseFlatKey is parseKey's fast path (wire.ScanFlatObject); ok is false when
// key is not of its form or not a valid key, which parseKeyJSON then
// says why. The values share key's memory.
func parseFlatKey(a *mappings.Aggregate, key []byte) ([]json.RawMessage, bool) {
	var buf [4]wire.FlatMember
	ms, ok := wire.ScanFlatObject(key, buf[:])
	if !ok || len(ms) != len(a.ID) {
		return nil, false
	}
	vals := make([]json.RawMessage, len(a.ID))
	for i, c := range a.ID {
		for _, m := range ms {
			if string(m.Name) == c {
				vals[i] = m.Value
				break
			}
		}
		if vals[i] == nil || string(vals[i]) == "null" {
			return nil, false
		}
	}
	return vals, true
}

// parseKeyJSON is parseKey with encoding/json, for every form of key.
func parseKeyJSON(a *mappings.Aggregate, key []byte) ([]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(key, &m); err != nil {
		return nil, fmt.Errorf("aggregate %s: key %.100s is not a JSON object: %w", a.Name, key, err)
	}
	vals := make([]json.RawMessage, len(a.ID))
	for i, c := range a.ID {
		v, ok := m[c]
		v = bytes.TrimSpace(v)
		if !ok || len(v) == 0 || string(v) == "null" {
			return nil, fmt.Errorf("aggregate %s: key %.100s has no value for id column %q", a.Name, key, c)
		}
		vals[i] = v
	}
	if len(m) != len(a.ID) {
		return nil, fmt.Errorf("aggregate %s: key %.100s has %d members, want the id columns %v", a.Name, key, len(m), a.ID)
	}
	return vals, nil
}

// sharedSets keeps the build's SharedSets for the next batches: a set
// holds a copy of each marked document of its batch, which would be
// garbage at every batch.
var sharedSets sync.Pool

// build builds the documents of keys (at most one statement's worth) in
// one snapshot in which every xid is visible. It returns one document per
// distinct key, in the order given: ids without a row are Deleted. A key
// that cannot be parsed is logged and skipped: no build can ever succeed
// for it (the build stage dead-letters such refs before they get here).
func build(ctx context.Context, db *pgxpool.Pool, a *mappings.Aggregate, keys [][]byte, xids []uint32, visibility time.Duration, log *slog.Logger) ([]wire.Document, error) {
	canon := make([][]byte, 0, len(keys))
	vals := make([][]json.RawMessage, 0, len(keys))
	for _, k := range keys {
		v, err := parseKey(a, k)
		if err != nil {
			log.Error("ref key is not an id of its aggregate; skipped", "aggregate", a.Name, "err", err)
			continue
		}
		canon = append(canon, idKey(a, v))
		vals = append(vals, v)
	}
	if len(vals) == 0 {
		return nil, nil
	}
	args, err := a.Build.Args(vals)
	if err != nil {
		return nil, fmt.Errorf("aggregate %s: %w", a.Name, err)
	}
	conn, err := db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("aggregate %s: acquire connection: %w", a.Name, err)
	}
	defer conn.Release()
	snap, err := openSnapshot(ctx, conn, xids, visibility)
	if err != nil {
		return nil, fmt.Errorf("aggregate %s: %w", a.Name, err)
	}
	defer snap.tx.Rollback(context.Background()) //nolint:errcheck // read-only
	stmt, shared := a.Build, (*mappings.SharedSet)(nil)
	if a.Batch != nil {
		// Batch leaves the objects of shared many-to-ones to one statement
		// each, in this snapshot: marked documents wait in pending.
		shared, _ = sharedSets.Get().(*mappings.SharedSet)
		stmt, shared = a.Batch, a.ReuseSharedSet(shared)
		defer sharedSets.Put(shared) // the documents are copied out of it
	}
	rows, err := snap.tx.Query(ctx, stmt.SQL, args...)
	if err != nil {
		return nil, fmt.Errorf("aggregate %s: build: %w", a.Name, err)
	}
	n := len(a.ID)
	var arena wire.Arena // the batch's documents share a few allocations
	lsn := wire.FormatLSN(snap.lsn)
	built := make(map[string]wire.Document, len(vals))
	// newDoc writes a built document in place in its envelope.
	newDoc := func(k []byte, n int, appendDoc func(dst []byte) []byte) wire.Document {
		d := wire.Document{Aggregate: a.Name, ID: json.RawMessage(k), Version: snap.lsn, LSN: lsn, Built: true}
		d.FillEnvelope(&arena, n, appendDoc)
		return d
	}
	var extra [][]byte // built ids whose encoding differs from every requested key
	idv := make([][]byte, n)
	var doc []byte
	dest := make([]any, n+1)
	for i := range idv {
		dest[i] = &idv[i]
	}
	dest[n] = &doc
	// The id columns (jsonb) and the document (json) come as text, which
	// is their JSON: read in place, each row's bytes are copied once, into
	// the key and the compacted document, not first into values of their
	// own (pgx's copy of every document was 5% of decant's CPU in a
	// Kafka-sink-only backfill).
	inPlace := len(rows.FieldDescriptions()) == n+1
	for _, fd := range rows.FieldDescriptions() {
		inPlace = inPlace && fd.Format == pgx.TextFormatCode
	}
	// Documents are stored and sent compact. PostgreSQL prints json and
	// jsonb values spaced; when none can be in the documents they are
	// compact as built and are copied, not scanned (wire.AppendCompact
	// was a tenth of decant's CPU in a Kafka-sink-only backfill).
	appendDoc := wire.AppendCompact
	if !a.Spaced {
		appendDoc = func(dst, src []byte) []byte { return append(dst, src...) }
	}
	type pendingDoc struct {
		key []byte
		i   int // shared's index of the document
	}
	var pending []pendingDoc          // documents with markers, until their shared objects are built
	raw := make([]json.RawMessage, n) // idKey copies what it keeps
	requested := make(map[string]bool, len(canon))
	for _, k := range canon {
		requested[string(k)] = true
	}
	for rows.Next() {
		if inPlace {
			rv := rows.RawValues()
			for i := range raw {
				raw[i] = rv[i]
			}
			doc = rv[n]
		} else {
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return nil, fmt.Errorf("aggregate %s: build: %w", a.Name, err)
			}
			for i := range idv {
				raw[i] = idv[i]
			}
		}
		k := idKey(a, raw)
		if !requested[string(k)] {
			extra = append(extra, k)
		}
		if shared != nil {
			i, err := shared.Add(doc)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("aggregate %s: build: %w", a.Name, err)
			}
			if i >= 0 {
				pending = append(pending, pendingDoc{k, i})
				continue
			}
		}
		built[string(k)] = newDoc(k, len(doc), func(dst []byte) []byte { return appendDoc(dst, doc) })
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("aggregate %s: build: %w", a.Name, err)
	}
	if len(pending) > 0 {
		if err := shared.Fetch(ctx, snap.tx); err != nil {
			return nil, fmt.Errorf("aggregate %s: build: %w", a.Name, err)
		}
		for _, p := range pending {
			var err error
			built[string(p.key)] = newDoc(p.key, shared.SplicedLen(p.i), func(dst []byte) []byte {
				dst, err = shared.AppendSpliced(dst, p.i, appendDoc)
				return dst
			})
			if err != nil {
				return nil, fmt.Errorf("aggregate %s: build: %w", a.Name, err)
			}
		}
	}
	docs := make([]wire.Document, 0, len(canon)+len(extra))
	seen := make(map[string]bool, len(canon))
	// A requested key that names a built row in another encoding (a ref
	// written while the id column was text: {"id":"2"} for the row built
	// as {"id":2}) is that row, not a deleted one: a delete of it would
	// hit the same search document as the built one.
	// The built row may have been requested too, in its own encoding: a
	// chunk can hold both keys.
	var builtAs map[string]bool // made at the first key not built, which most builds never have
	for _, k := range append(canon, extra...) {
		if seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		d, ok := built[string(k)]
		if !ok {
			d = wire.Document{Aggregate: a.Name, ID: json.RawMessage(k), Version: snap.lsn, LSN: lsn}
			if builtAs == nil {
				builtAs = make(map[string]bool, len(built))
				for bk := range built {
					builtAs[looseKey([]byte(bk))] = true
				}
			}
			if builtAs[looseKey(k)] {
				continue
			}
			d.Deleted = true
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// looseKey is an id key with its string values unquoted: keys that differ
// only in whether a value is a JSON string or a number ({"id":"2"},
// {"id":2}) get the same loose key, as they get the same search document
// id.
func looseKey(k []byte) string {
	var buf [4]wire.FlatMember
	ms, ok := wire.ScanFlatObject(k, buf[:])
	if !ok {
		return looseKeyJSON(k)
	}
	slices.SortFunc(ms, func(x, y wire.FlatMember) int { return bytes.Compare(x.Name, y.Name) })
	var b strings.Builder
	for _, m := range ms {
		v := m.Value
		switch {
		case v[0] == '"':
			v = v[1 : len(v)-1] // plain ASCII: unquoted as it is
		case string(v) == "null":
			v = nil // as encoding/json leaves a string it decodes null into
		}
		b.Write(m.Name)
		b.WriteByte(0)
		b.Write(v)
		b.WriteByte(0)
	}
	return b.String()
}

// looseKeyJSON is looseKey with encoding/json, for every form of key.
func looseKeyJSON(k []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(k, &m) != nil {
		return string(k)
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		v := m[n]
		var s string
		if json.Unmarshal(v, &s) == nil {
			v = json.RawMessage(s)
		}
		b.WriteString(n)
		b.WriteByte(0)
		b.Write(v)
		b.WriteByte(0)
	}
	return b.String()
}
