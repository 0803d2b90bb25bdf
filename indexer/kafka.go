package indexer

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/internal/fence"
	"github.com/decant-cdc/decant/wire"
)

// KafkaSinkConfig configures a KafkaSink. Zero values take the defaults shown.
type KafkaSinkConfig struct {
	// Kafka are the client options (brokers, TLS, SASL). Required: at least
	// kgo.SeedBrokers. The sink adds acks=all and the idempotent producer.
	Kafka []kgo.Opt
	// TopicPrefix starts every topic: <prefix>.agg.<aggregate>, <prefix>.dlq. Default: decant.
	TopicPrefix string
	// Partitions and ReplicationFactor of the topics the sink creates. Default: 6 and 1.
	Partitions        int
	ReplicationFactor int
	// MinInsyncReplicas of the topics the sink creates. Default: 0 (the
	// broker's default).
	MinInsyncReplicas int
	// VersionGuard is how many keys the in-process last-version guard
	// remembers (least recently written keys are forgotten first). A
	// document older than the last version this process wrote for its key
	// is skipped and counted as a conflict. Negative disables the guard.
	// Default: 100000.
	VersionGuard int
	// MaxBufferedRecords bounds the records produced but not yet
	// acknowledged; Write blocks when it is reached. Default: 10000.
	MaxBufferedRecords int
	// Logger receives lifecycle lines and dead-letter events. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the sink's metrics. Default: none.
	Registerer prometheus.Registerer
}

func (c *KafkaSinkConfig) defaults() {
	d := config.Default()
	topicDefaults(d, &c.TopicPrefix, &c.Partitions, &c.ReplicationFactor)
	if c.VersionGuard == 0 {
		c.VersionGuard = 100000
	}
	if c.MaxBufferedRecords == 0 {
		c.MaxBufferedRecords = 10000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// topicDefaults fills the topic settings both sinks have (prefix,
// partitions and replication factor of the topics they create) from
// config's defaults where they are zero.
func topicDefaults(d config.Config, prefix *string, partitions, replication *int) {
	if *prefix == "" {
		*prefix = d.Kafka.TopicPrefix
	}
	if *partitions == 0 {
		*partitions = d.Kafka.Partitions
	}
	if *replication == 0 {
		*replication = d.Kafka.ReplicationFactor
	}
}

func (c *KafkaSinkConfig) validate() error {
	var errs []error
	if len(c.Kafka) == 0 {
		errs = append(errs, errors.New("indexer: Kafka client options are required (kafka.brokers)"))
	}
	if c.Partitions < 1 || c.ReplicationFactor < 1 {
		errs = append(errs, errors.New("indexer: partitions and replication factor must be at least 1 (kafka.partitions, kafka.replication_factor)"))
	}
	if c.MaxBufferedRecords < 1 {
		errs = append(errs, errors.New("indexer: MaxBufferedRecords must be at least 1"))
	}
	return errors.Join(errs...)
}

// KafkaSink writes documents to the compacted aggregate topics
// <prefix>.agg.<aggregate>. It is safe for concurrent use.
type KafkaSink struct {
	cfg    KafkaSinkConfig
	log    *slog.Logger
	met    *metrics
	stats  stats
	kafka  *kgo.Client
	admin  *kadm.Client
	topics *topicSet
	guard  *versionGuard

	closeOnce sync.Once
}

// NewKafkaSink validates cfg and creates the Kafka client. It does no other
// I/O: topics are created on first use.
func NewKafkaSink(cfg KafkaSinkConfig) (*KafkaSink, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cl, err := newProducer(cfg.Kafka, cfg.MaxBufferedRecords)
	if err != nil {
		return nil, err
	}
	admin := kadm.NewClient(cl)
	return &KafkaSink{
		cfg: cfg, log: cfg.Logger.With("stage", "index", "sink", sinkKafka), met: newMetrics(cfg.Registerer),
		kafka: cl, admin: admin,
		topics: &topicSet{admin: admin, partitions: int32(cfg.Partitions), rf: int16(cfg.ReplicationFactor), minInsync: int16(cfg.MinInsyncReplicas)},
		guard:  newVersionGuard(cfg.VersionGuard),
	}, nil
}

// newProducer returns a client that produces with acks=all and the
// idempotent producer (franz-go's default once acks=all), keyed records
// hashed like the Java client so a key always lands on one partition.
func newProducer(opts []kgo.Opt, maxBuffered int) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(maxBuffered),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()), // kafka.compression overrides it
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("indexer: kafka client: %w", err)
	}
	return cl, nil
}

// Close flushes nothing (Write already waited for its acks) and releases the
// client. It is idempotent; call it after the last Write returned.
func (s *KafkaSink) Close() {
	s.closeOnce.Do(func() { s.kafka.Close() })
}

// Stats returns the sink's counters.
func (s *KafkaSink) Stats() Stats { return s.stats.snapshot() }

// Write produces every document to its aggregate topic, key = the document's
// ID bytes as given, value = the envelope; a deleted document is followed
// by a tombstone with the same key. Documents of one key are produced in
// slice order, so they reach the partition in that order.
//
// Write blocks until Kafka acknowledged every record (acks=all). A record
// Kafka can never take (too large) is written to <prefix>.dlq instead and
// counted. Any other failure returns an error and the whole batch must be
// retried: records are idempotent per key (compaction keeps the last), so
// writing some of them twice is harmless. Safe for concurrent use.
func (s *KafkaSink) Write(ctx context.Context, docs []wire.Document) error {
	started := time.Now()
	recs := make([]*kgo.Record, 0, len(docs)+len(docs)/8)
	owner := make([]int, 0, cap(recs)) // record index → document index
	// The records, their values and their headers share allocations:
	// they live until Kafka acknowledged the batch.
	store := make([]kgo.Record, 0, cap(recs))
	record := func(r kgo.Record) *kgo.Record {
		store = append(store, r) // past cap, earlier pointers keep the old array
		return &store[len(store)-1]
	}
	var values wire.Arena
	var headers []kgo.RecordHeader // of version headersOf: a build's documents share one
	var headersOf uint64
	var dead []wire.DeadLetter
	for i := range docs {
		d := &docs[i]
		if err := checkDocument(d); err != nil {
			dead = append(dead, wire.DeadLetter{Sink: sinkKafka, Aggregate: d.Aggregate, ID: d.ID, Version: d.Version, Reason: err.Error()})
			continue
		}
		topic := wire.AggTopic(s.cfg.TopicPrefix, d.Aggregate)
		if !s.guard.admit(topic, d.ID, d.Version) {
			s.stats.conflicts.Add(1)
			s.met.conflicts.WithLabelValues(sinkKafka, d.Aggregate).Inc()
			s.log.Debug("skipped a document older than one already written", "aggregate", d.Aggregate, "id", string(d.ID), "version", d.Version)
			continue
		}
		if err := s.topics.ensure(ctx, topic, wire.AggTopicConfigs()); err != nil {
			return err
		}
		// checkDocument has checked the id and the document.
		value, err := d.Envelope, error(nil) // the build stage wrote it around the document
		if value == nil {
			value = values.Fill(len(d.Doc)+len(d.ID)+len(d.Aggregate)+96, func(dst []byte) []byte {
				dst, err = d.AppendEncoded(dst)
				return dst
			})
		}
		if err != nil {
			dead = append(dead, wire.DeadLetter{Sink: sinkKafka, Aggregate: d.Aggregate, ID: d.ID, Version: d.Version, Topic: topic, Reason: err.Error()})
			continue
		}
		if headers == nil || d.Version != headersOf {
			headers, headersOf = []kgo.RecordHeader{{Key: wire.HeaderLSN, Value: wire.AppendLSN(nil, d.Version)}}, d.Version
		}
		recs = append(recs, record(kgo.Record{Topic: topic, Key: d.ID, Value: value, Headers: headers}))
		owner = append(owner, i)
		if d.Deleted {
			recs = append(recs, record(kgo.Record{Topic: topic, Key: d.ID, Headers: headers}))
			owner = append(owner, i)
		}
	}
	var results kgo.ProduceResults
	if f := fence.From(ctx); f != nil && len(recs) > 0 {
		// A build stage session: each refs partition's writer, in a
		// transaction that a newer owner of the partition fences.
		var err error
		if results, err = produceFenced(ctx, f, docs, recs, owner); err != nil {
			return err
		}
	} else {
		results = produceSync(ctx, s.kafka, recs)
	}
	var failed error
	tooLarge := map[int]bool{}
	for j, r := range results {
		d := &docs[owner[j]]
		switch {
		case r.Err == nil:
			if r.Record.Value == nil {
				continue // the tombstone of a deleted document: counted with its envelope
			}
			if d.Deleted {
				s.stats.deleted.Add(1)
				s.met.docs.WithLabelValues(sinkKafka, d.Aggregate, "delete").Inc()
			} else {
				s.stats.written.Add(1)
				s.met.docs.WithLabelValues(sinkKafka, d.Aggregate, "index").Inc()
			}
		case isTooLarge(r.Err):
			if !tooLarge[owner[j]] {
				tooLarge[owner[j]] = true
				dead = append(dead, wire.DeadLetter{Sink: sinkKafka, Aggregate: d.Aggregate, ID: d.ID, Version: d.Version,
					Topic: r.Record.Topic, Reason: r.Err.Error()})
			}
		case failed == nil:
			failed = fmt.Errorf("produce aggregate %s id %s to %s: %w", d.Aggregate, d.ID, r.Record.Topic, r.Err)
		}
	}
	if failed != nil {
		return failed
	}
	if err := s.deadLetters(ctx, dead); err != nil {
		return err
	}
	s.met.latency.WithLabelValues(sinkKafka).Observe(time.Since(started).Seconds())
	return nil
}

// deadLetters writes dead letters to <prefix>.dlq and waits for the acks.
func (s *KafkaSink) deadLetters(ctx context.Context, dead []wire.DeadLetter) error {
	return writeDeadLetters(ctx, s.kafka, s.topics, wire.DLQTopic(s.cfg.TopicPrefix), dead, func(l *wire.DeadLetter) {
		s.stats.dlq.Add(1)
		s.met.dlq.WithLabelValues(l.Sink, l.Aggregate).Inc()
		s.log.Error("document refused; written to the dead-letter topic", "aggregate", l.Aggregate, "id", string(l.ID),
			"version", l.Version, "topic", l.Topic, "reason", l.Reason)
	})
}

// writeDeadLetters produces dead letters keyed by aggregate id and waits for
// the acks; done is called for each acknowledged one. An error means the
// batch must be retried.
func writeDeadLetters(ctx context.Context, cl *kgo.Client, topics *topicSet, topic string, dead []wire.DeadLetter, done func(*wire.DeadLetter)) error {
	if len(dead) == 0 {
		return nil
	}
	if err := topics.ensure(ctx, topic, wire.DLQTopicConfigs()); err != nil {
		return err
	}
	recs := make([]*kgo.Record, len(dead))
	for i := range dead {
		dead[i].Stage = wire.StageIndex
		key, value := dead[i].Encode()
		recs[i] = &kgo.Record{Topic: topic, Key: key, Value: value}
	}
	for i, r := range produceSync(ctx, cl, recs) {
		if r.Err != nil {
			return fmt.Errorf("write dead letter for aggregate %s id %s to %s: %w", dead[i].Aggregate, dead[i].ID, topic, r.Err)
		}
		done(&dead[i])
	}
	return nil
}

// produceSync is cl.ProduceSync with the results in the order of recs:
// franz-go returns them in the order they completed, which across
// partitions is not the order given.
func produceSync(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) kgo.ProduceResults {
	return inRecordOrder(recs, cl.ProduceSync(ctx, recs...))
}

// inRecordOrder orders results like recs (each result carries its record).
func inRecordOrder(recs []*kgo.Record, results kgo.ProduceResults) kgo.ProduceResults {
	at := make(map[*kgo.Record]int, len(recs))
	for i, r := range recs {
		at[r] = i
	}
	out := make(kgo.ProduceResults, len(recs))
	for _, r := range results {
		out[at[r.Record]] = r
	}
	return out
}

// topicSet creates topics once per process.
type topicSet struct {
	admin      *kadm.Client
	partitions int32
	rf         int16
	minInsync  int16
	created    sync.Map // topic → struct{}
}

// ensure creates topic with configs (wire.EnsureTopic) unless this process
// already did.
func (t *topicSet) ensure(ctx context.Context, topic string, configs map[string]string) error {
	if _, ok := t.created.Load(topic); ok {
		return nil
	}
	if err := wire.EnsureTopic(ctx, t.admin, topic, t.partitions, t.rf, t.minInsync, configs); err != nil {
		return err
	}
	t.created.Store(topic, struct{}{})
	return nil
}

// versionGuard remembers the last version written per key, for a bounded
// number of keys (LRU). It is a second line of defence: the caller already
// writes each key's documents in version order (one refs partition, one
// worker, builds versioned by a WAL position that only grows).
//
// It holds no pointers, so the garbage collector never scans it: a key is
// known by a 128-bit hash of (topic, key), and the LRU list is a slice of
// slots linked by index. With the container/list it had, the 100,000 keys
// of the default were 300,000 small objects with pointers in every
// collection, and each new key cost three allocations. Two keys share a
// hash with a probability of about n²/2¹²⁹ (10⁻²⁹ for 100,000 keys).
type versionGuard struct {
	mu     sync.Mutex
	max    int
	seeds  [2]maphash.Seed
	byKey  map[guardKey]int32 // → index in slots
	slots  []guardSlot
	newest int32 // most recently admitted slot, -1 when empty
	oldest int32 // least recently admitted slot, -1 when empty
}

type guardKey [2]uint64

type guardSlot struct {
	key     guardKey
	version uint64
	newer   int32 // -1 at the newest
	older   int32 // -1 at the oldest
}

// newVersionGuard returns a guard of max keys (at most math.MaxInt32, as
// slots are linked by int32), or nil (admit everything) when max is not
// positive.
func newVersionGuard(max int) *versionGuard {
	if max <= 0 {
		return nil
	}
	max = min(max, math.MaxInt32)
	return &versionGuard{max: max, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		byKey: make(map[guardKey]int32), newest: -1, oldest: -1}
}

func (g *versionGuard) hash(topic string, key []byte) guardKey {
	var k guardKey
	var h maphash.Hash
	for i, seed := range g.seeds {
		h.SetSeed(seed)
		h.WriteString(topic)
		h.WriteByte(0) // topic names hold no NUL
		h.Write(key)
		k[i] = h.Sum64()
	}
	return k
}

// unlink takes slot i out of the LRU list.
func (g *versionGuard) unlink(i int32) {
	s := &g.slots[i]
	if s.newer >= 0 {
		g.slots[s.newer].older = s.older
	} else {
		g.newest = s.older
	}
	if s.older >= 0 {
		g.slots[s.older].newer = s.newer
	} else {
		g.oldest = s.newer
	}
}

// pushNewest puts slot i at the newest end of the LRU list.
func (g *versionGuard) pushNewest(i int32) {
	s := &g.slots[i]
	s.newer, s.older = -1, g.newest
	if g.newest >= 0 {
		g.slots[g.newest].newer = i
	}
	g.newest = i
	if g.oldest < 0 {
		g.oldest = i
	}
}

// admit reports whether version may be written for (topic, key): it is not
// lower than the last version admitted for it. An admitted version is
// remembered.
func (g *versionGuard) admit(topic string, key []byte, version uint64) bool {
	if g == nil {
		return true
	}
	k := g.hash(topic, key)
	g.mu.Lock()
	defer g.mu.Unlock()
	if i, ok := g.byKey[k]; ok {
		if version < g.slots[i].version {
			return false
		}
		g.slots[i].version = version
		g.unlink(i)
		g.pushNewest(i)
		return true
	}
	var i int32
	if len(g.slots) < g.max {
		i = int32(len(g.slots))
		g.slots = append(g.slots, guardSlot{})
	} else { // forget the least recent key and take its slot
		i = g.oldest
		g.unlink(i)
		delete(g.byKey, g.slots[i].key)
	}
	g.slots[i] = guardSlot{key: k, version: version}
	g.byKey[k] = i
	g.pushNewest(i)
	return true
}
