package indexer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/trace"
	"strings"
	"sync"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/wire"
)

// DefaultRecheckInterval is how often an ESSink re-reads an alias and its
// reindex marker by default.
const DefaultRecheckInterval = 5 * time.Second

// ESSinkConfig configures an ESSink. Zero values take the defaults shown.
type ESSinkConfig struct {
	// Client is the search engine's client: Elasticsearch's (functional
	// API only: 7.17 refuses the typed API's compatibility headers) or
	// OpenSearch's (NewOpenSearchClient). Required.
	Client Search
	// Kind names the engine in metrics (sink label), dead letters and
	// logs: KindElasticsearch or KindOpenSearch. Default: elasticsearch.
	Kind string
	// Aliases maps an aggregate name to its index alias (mappings
	// Aggregate.Index). Default: the aggregate name.
	Aliases map[string]string
	// Kafka are the client options for the dead-letter topic
	// <prefix>.dlq. Required.
	Kafka []kgo.Opt
	// TopicPrefix names the dead-letter topic <prefix>.dlq. Default: decant.
	TopicPrefix string
	// Partitions and ReplicationFactor of the dead-letter topic if the sink
	// creates it. Default: 6 and 1.
	Partitions        int
	ReplicationFactor int
	// BulkActions and BulkBytes bound one bulk request. Default: 10000 and
	// 5 MiB: Elasticsearch indexed 650 kB requests at half the rate of 5 MB ones.
	BulkActions int
	BulkBytes   int
	// MaxRequests bounds the bulk requests in flight, all concurrent
	// Writes together: the build stage keeps several batches in flight
	// and each writes in parallel, which would otherwise pile requests on
	// Elasticsearch faster than it indexes them. Default: 4.
	MaxRequests int
	// MaxRetries is how many retry rounds one Write makes after retriable
	// errors before it returns an error (the caller then retries the
	// batch). Default: 8.
	MaxRetries int
	// RetryBackoff is the first wait between rounds; it doubles up to
	// MaxBackoff. Default: 200ms and 10s.
	RetryBackoff time.Duration
	MaxBackoff   time.Duration
	// RecheckInterval is how long the sink trusts what it read about an
	// alias (its indexes and the <alias>-next reindex marker). Default:
	// DefaultRecheckInterval. ReindexOptions.Settle must exceed it.
	RecheckInterval time.Duration
	// Logger receives retries and dead letters. Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the sink's metrics. Default: none.
	Registerer prometheus.Registerer
}

func (c *ESSinkConfig) defaults() {
	d := config.Default()
	topicDefaults(d, &c.TopicPrefix, &c.Partitions, &c.ReplicationFactor)
	if c.BulkActions == 0 {
		c.BulkActions = d.Indexer.BulkActions
	}
	if c.Kind == "" {
		c.Kind = KindElasticsearch
	}
	if c.BulkBytes == 0 {
		c.BulkBytes = 5 << 20
	}
	if c.MaxRequests == 0 {
		c.MaxRequests = 4
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 8
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 200 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.RecheckInterval == 0 {
		c.RecheckInterval = DefaultRecheckInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *ESSinkConfig) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("indexer: an Elasticsearch client is required (elasticsearch.urls)"))
	}
	if len(c.Kafka) == 0 {
		errs = append(errs, errors.New("indexer: Kafka client options are required for the dead-letter topic (kafka.brokers)"))
	}
	if c.BulkActions < 1 || c.BulkBytes < 1 || c.MaxRequests < 1 {
		errs = append(errs, errors.New("indexer: BulkActions, BulkBytes and MaxRequests must be at least 1 (indexer.bulk_actions)"))
	}
	if c.MaxRetries < 0 || c.RetryBackoff < 0 || c.MaxBackoff < c.RetryBackoff || c.RecheckInterval < 0 {
		errs = append(errs, errors.New("indexer: MaxRetries, RetryBackoff and RecheckInterval must not be negative, and MaxBackoff at least RetryBackoff"))
	}
	return errors.Join(errs...)
}

// ESSink writes documents to Elasticsearch through each aggregate's alias.
// It is safe for concurrent use.
type ESSink struct {
	cfg    ESSinkConfig
	kind   string // the engine: the sink label
	es     Search
	log    *slog.Logger
	met    *metrics
	stats  stats
	kafka  *kgo.Client
	topics *topicSet

	qmu     sync.Mutex
	queue   []*bulkPart // parts waiting for a bulk request (coalesce.go)
	sending int         // bulk requests in flight, at most MaxRequests

	mu      sync.Mutex
	targets map[string]aliasTargets // alias → what it points at

	closeOnce sync.Once
}

// aliasTargets is what the sink last read about an alias.
type aliasTargets struct {
	exists bool
	next   string    // concrete index of a reindex in progress, or ""
	read   time.Time // when the request was sent
}

// NewESSink validates cfg and creates the dead-letter producer. It does no
// other I/O; indexes and aliases are made by EnsureIndex.
func NewESSink(cfg ESSinkConfig) (*ESSink, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cl, err := newProducer(cfg.Kafka, 1000)
	if err != nil {
		return nil, err
	}
	met := newMetrics(cfg.Registerer)
	// Every aggregate's series exist from the start, at 0, so rates and
	// alerts over them have something to read before the first event.
	met.retries.WithLabelValues(cfg.Kind)
	met.requests.WithLabelValues(cfg.Kind)
	met.parts.WithLabelValues(cfg.Kind)
	for agg := range cfg.Aliases {
		met.docs.WithLabelValues(cfg.Kind, agg, "index")
		met.docs.WithLabelValues(cfg.Kind, agg, "delete")
		met.conflicts.WithLabelValues(cfg.Kind, agg)
		met.dlq.WithLabelValues(cfg.Kind, agg)
	}
	return &ESSink{
		cfg: cfg, kind: cfg.Kind, es: cfg.Client, log: cfg.Logger.With("stage", "index", "sink", cfg.Kind), met: met,
		kafka:   cl,
		topics:  &topicSet{admin: kadm.NewClient(cl), partitions: int32(cfg.Partitions), rf: int16(cfg.ReplicationFactor)},
		targets: map[string]aliasTargets{},
	}, nil
}

// Close releases the dead-letter producer. It is idempotent; call it after
// the last Write returned.
func (s *ESSink) Close() {
	s.closeOnce.Do(func() { s.kafka.Close() })
}

// Stats returns the sink's counters.
func (s *ESSink) Stats() Stats { return s.stats.snapshot() }

// Alias returns the index alias of an aggregate.
func (s *ESSink) Alias(aggregate string) string {
	if a, ok := s.cfg.Aliases[aggregate]; ok && a != "" {
		return a
	}
	return aggregate
}

// Write indexes or deletes every document through the bulk API, _id = the
// aggregate id as text (see DocumentID), version = Document.Version with
// version_type external_gte: a document never replaces a newer version of
// itself, so replays and late builds are harmless. A 409 (the index already
// holds this or a newer version) is a success, counted as a conflict; so is
// a 404 on delete. While a reindex of the aggregate is in progress, every
// document is also written to the new index.
//
// Retriable failures (429, 5xx, connection errors, a read-only or missing
// index) are retried, only for the documents that failed, with exponential
// backoff, MaxRetries rounds at most; then Write returns an error and the
// caller must retry the batch. A document Elasticsearch refuses for good
// (mapping conflict, too large, …) is written to <prefix>.dlq with the
// reason and counted; the rest of the batch is indexed. Write returns nil
// only when every document is indexed, superseded or dead-lettered (and the
// dead letters acknowledged by Kafka). Write does not refresh: see Refresh.
// Safe for concurrent use.
func (s *ESSink) Write(ctx context.Context, docs []wire.Document) error {
	started := time.Now()
	var dead []wire.DeadLetter
	acts := make([]action, 0, len(docs))
	// One action per index and _id: two documents of one write that land
	// on one _id (ids that differ only in encoding, {"id":"2"} and
	// {"id":2}) would be applied in either order once a retry resends only
	// one of them. The newer (on a tie, the later) one stays.
	// A superseded document is counted as Elasticsearch would have
	// answered it in order: older than the one kept, a conflict; the same
	// version (a duplicate), written.
	at := make(map[string]int, len(docs))
	var superseded []action
	add := func(a action) {
		k := a.target + "\x00" + a.id
		j, ok := at[k]
		if !ok {
			at[k] = len(acts)
			acts = append(acts, a)
			return
		}
		if docs[a.doc].Version < docs[acts[j].doc].Version {
			superseded = append(superseded, a)
			return
		}
		superseded = append(superseded, acts[j])
		acts[j] = a
	}
	for i := range docs {
		d := &docs[i]
		alias := s.Alias(d.Aggregate)
		err := checkDocument(d)
		var id string
		if err == nil {
			id, err = DocumentID(d.ID)
		}
		if err != nil {
			dead = append(dead, wire.DeadLetter{Sink: s.kind, Aggregate: d.Aggregate, ID: d.ID, Version: d.Version, Index: alias, Reason: err.Error()})
			continue
		}
		t, err := s.aliasTargets(ctx, alias)
		if err != nil {
			return err
		}
		add(action{doc: i, id: id, target: alias, delete: d.Deleted, body: encodeAction(d, id, alias, true)})
		if t.next != "" {
			add(action{doc: i, id: id, target: t.next, next: true, delete: d.Deleted, body: encodeAction(d, id, t.next, false)})
		}
	}

	backoff := s.cfg.RetryBackoff
	for round, pending := 0, acts; len(pending) > 0; round++ {
		retry, why, err := s.send(ctx, docs, pending, &dead)
		if err != nil {
			return err
		}
		if len(retry) == 0 {
			break
		}
		if round >= s.cfg.MaxRetries {
			return fmt.Errorf("elasticsearch: %d document(s) still failing after %d retries, e.g. aggregate %s id %s: %s",
				len(retry), round, docs[retry[0].doc].Aggregate, docs[retry[0].doc].ID, why)
		}
		s.stats.retries.Add(1)
		s.met.retries.WithLabelValues(s.kind).Inc()
		s.log.Warn("elasticsearch refused documents for now; retrying", "docs", len(retry), "reason", why, "round", round+1, "backoff", backoff)
		if err := sleepCtx(ctx, backoff); err != nil {
			return err
		}
		backoff = min(backoff*2, s.cfg.MaxBackoff)
		pending = retry
		s.forgetTargets() // an alias may have been recreated or a reindex finished
	}

	err := writeDeadLetters(ctx, s.kafka, s.topics, wire.DLQTopic(s.cfg.TopicPrefix), dead, func(l *wire.DeadLetter) {
		s.stats.dlq.Add(1)
		s.met.dlq.WithLabelValues(s.kind, l.Aggregate).Inc()
		s.log.Error("document refused by elasticsearch; written to the dead-letter topic", "aggregate", l.Aggregate,
			"id", string(l.ID), "version", l.Version, "index", l.Index, "status", l.Status, "reason", l.Reason)
	})
	if err != nil {
		return err
	}
	for _, a := range superseded {
		d := &docs[a.doc]
		switch {
		case a.next:
		case d.Version < docs[acts[at[a.target+"\x00"+a.id]].doc].Version:
			s.stats.conflicts.Add(1)
			s.met.conflicts.WithLabelValues(s.kind, d.Aggregate).Inc()
		case d.Deleted:
			s.stats.deleted.Add(1)
			s.met.docs.WithLabelValues(s.kind, d.Aggregate, "delete").Inc()
		default:
			s.stats.written.Add(1)
			s.met.docs.WithLabelValues(s.kind, d.Aggregate, "index").Inc()
		}
	}
	s.met.latency.WithLabelValues(s.kind).Observe(time.Since(started).Seconds())
	return nil
}

// send sends actions in bulk requests of at most BulkActions and BulkBytes,
// records the results, appends refused documents to dead and returns the
// actions to retry with a sample reason. An error means the batch must be
// retried as a whole (a response decant cannot read).
func (s *ESSink) send(ctx context.Context, docs []wire.Document, acts []action, dead *[]wire.DeadLetter) (retry []action, why string, err error) {
	for len(acts) > 0 {
		n, size := 0, 0
		for n < len(acts) && n < s.cfg.BulkActions && (n == 0 || size+len(acts[n].body) <= s.cfg.BulkBytes) {
			size += len(acts[n].body)
			n++
		}
		r, w, err := s.sendChunk(ctx, docs, acts[:n], dead)
		if err != nil {
			return nil, "", err
		}
		retry = append(retry, r...)
		if w != "" {
			why = w
		}
		acts = acts[n:]
	}
	return retry, why, nil
}

// bulkFilter is what classify reads of each item: its status and error.
var bulkFilter = []string{"items.*.status", "items.*.error"}

func (s *ESSink) sendChunk(ctx context.Context, docs []wire.Document, acts []action, dead *[]wire.DeadLetter) (retry []action, why string, err error) {
	// Sized once: growing a bulk body of megabytes by doubling cleared and
	// copied it several times (6% of decant's CPU in an initial load).
	n := 0
	for _, a := range acts {
		n += len(a.body)
	}
	body := make([]byte, 0, n)
	for _, a := range acts {
		body = append(body, a.body...)
	}
	r := s.bulk(ctx, body, len(acts))
	code, resp := r.code, r.resp
	switch {
	case r.err != nil && ctx.Err() != nil:
		return nil, "", ctx.Err()
	case r.unreachable:
		return acts, r.err.Error(), nil // connection refused, reset, timeout
	case r.err != nil:
		return nil, "", r.err // fenced, or an answer decant cannot read
	case code == http.StatusRequestEntityTooLarge && len(acts) > 1:
		h := len(acts) / 2
		r1, w1, err := s.sendChunk(ctx, docs, acts[:h], dead)
		if err != nil {
			return nil, "", err
		}
		r2, w2, err := s.sendChunk(ctx, docs, acts[h:], dead)
		return append(r1, r2...), w1 + w2, err
	case code == http.StatusRequestEntityTooLarge:
		a := acts[0]
		d := &docs[a.doc]
		*dead = append(*dead, wire.DeadLetter{Sink: s.kind, Aggregate: d.Aggregate, ID: d.ID, Version: d.Version, Index: a.target, Status: code,
			Reason: fmt.Sprintf("document of %d bytes is larger than the cluster accepts (http.max_content_length)", len(d.Doc))})
		return nil, "", nil
	case code == http.StatusTooManyRequests || code >= 500:
		return acts, esError(code, resp).Error(), nil
	case code != http.StatusOK:
		return nil, "", fmt.Errorf("elasticsearch bulk request refused: %w", esError(code, resp))
	}
	items := r.items
	for i, it := range items {
		a := acts[i]
		d := &docs[a.doc]
		switch classify(a.delete, it) {
		case outcomeOK:
			if a.next {
				continue // counted once, on the alias
			}
			if a.delete {
				s.stats.deleted.Add(1)
				s.met.docs.WithLabelValues(s.kind, d.Aggregate, "delete").Inc()
			} else {
				s.stats.written.Add(1)
				s.met.docs.WithLabelValues(s.kind, d.Aggregate, "index").Inc()
			}
		case outcomeConflict:
			if a.next {
				continue
			}
			s.stats.conflicts.Add(1)
			s.met.conflicts.WithLabelValues(s.kind, d.Aggregate).Inc()
		case outcomeRetry:
			retry = append(retry, a)
			why = fmt.Sprintf("%s: status %d %s", a.target, it.Status, it.Error.String())
		case outcomeReject:
			*dead = append(*dead, wire.DeadLetter{Sink: s.kind, Aggregate: d.Aggregate, ID: d.ID, Version: d.Version,
				Index: a.target, Status: it.Status, Reason: it.Error.String()})
		}
	}
	return retry, why, nil
}

// errAliasMissing means an aggregate's alias does not exist: EnsureIndex
// (run at start-up) creates it. Writing anyway would let Elasticsearch
// auto-create an index under the alias's name.
var errAliasMissing = errors.New("alias does not exist")

// aliasTargets returns what alias points at, reading it again when the last
// read is older than RecheckInterval. A missing alias is an error the
// caller retries.
func (s *ESSink) aliasTargets(ctx context.Context, alias string) (aliasTargets, error) {
	s.mu.Lock()
	t, ok := s.targets[alias]
	s.mu.Unlock()
	if ok && time.Since(t.read) < s.cfg.RecheckInterval {
		return t, nil
	}
	read := time.Now()
	al, err := getAliases(ctx, s.es, alias, nextAlias(alias))
	if err != nil {
		return aliasTargets{}, fmt.Errorf("elasticsearch: %w", err)
	}
	t = aliasTargets{exists: len(al[alias]) > 0, read: read}
	if !t.exists {
		return aliasTargets{}, fmt.Errorf("elasticsearch: %w: %s (decant creates it at start-up; run `decant check`)", errAliasMissing, alias)
	}
	if n := al[nextAlias(alias)]; len(n) == 1 && !(len(al[alias]) == 1 && al[alias][0] == n[0]) {
		t.next = n[0]
	}
	s.mu.Lock()
	s.targets[alias] = t
	s.mu.Unlock()
	return t, nil
}

func (s *ESSink) forgetTargets() {
	s.mu.Lock()
	clear(s.targets)
	s.mu.Unlock()
}

// Refresh makes every document written so far to the aggregate's alias
// (and to a reindex's new index) visible to searches. Write never
// refreshes; tests and read-your-writes waits call this.
func (s *ESSink) Refresh(ctx context.Context, aggregate string) error {
	alias := s.Alias(aggregate)
	defer trace.StartRegion(ctx, "search refresh").End()
	code, body, err := do(ctx, s.es, esapi.IndicesRefreshRequest{Index: []string{alias, nextAlias(alias)}, IgnoreUnavailable: esapi.BoolPtr(true)})
	if err != nil {
		return fmt.Errorf("refresh %s: %w", alias, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("refresh %s: %s", alias, strings.TrimSpace(esError(code, body).Error()))
	}
	return nil
}
