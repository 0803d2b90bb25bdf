package watermark

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// Querier is satisfied by *pgxpool.Pool and *pgx.Conn.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config names what to look at. All fields are required.
type Config struct {
	Slot        string
	TopicPrefix string
	// Group is the consumer group prefix of the map and build stages.
	Group string
	// RawTopics are the raw topics the map stage consumes (mapped tables).
	RawTopics []string
	// Aggregates whose refs topics the build stage consumes.
	Aggregates []string
	// Poll is how often Wait re-reads positions. Default: 50ms.
	Poll time.Duration
	// Snapshot is true when the streamer takes an initial snapshot
	// (snapshot_mode initial): Wait then also needs its "done" marker.
	Snapshot bool
	// ReplicationFactor and MinInsync are what decant creates topics with
	// (kafka.replication_factor, config.Kafka.MinInsync): Status warns
	// about existing topics that are less durable. 0 checks nothing.
	ReplicationFactor, MinInsync int
}

// ConfigFrom names what decant.yaml's pipeline consists of for the bound
// mappings: its slot, topics and groups.
func ConfigFrom(cfg *config.Config, model *mappings.Model) Config {
	c := Config{Slot: cfg.Postgres.Slot, TopicPrefix: cfg.Kafka.TopicPrefix, Group: cfg.ResolverGroup(),
		Snapshot: cfg.Streamer.Snapshots(), Aggregates: model.AggregateNames(),
		ReplicationFactor: cfg.Kafka.ReplicationFactor, MinInsync: cfg.Kafka.MinInsync()}
	for _, t := range model.Tables() {
		c.RawTopics = append(c.RawTopics, wire.RawTopic(cfg.Kafka.TopicPrefix, t.Schema, t.Name))
	}
	return c
}

// Tracker reads watermarks. Safe for concurrent use.
type Tracker struct {
	cfg      Config
	db       Querier
	admin    *kadm.Client
	kopts    []kgo.Opt
	snapDone atomic.Bool
	queries  atomic.Int64 // SlotLSN calls: PostgreSQL queries

	client    *kgo.Client // opened by Dial, closed by Close
	closeOnce sync.Once
}

// New returns a Tracker; it does no I/O. kopts are the Kafka connection
// options, for reading the streamer's snapshot marker.
func New(cfg Config, db Querier, admin *kadm.Client, kopts []kgo.Opt) *Tracker {
	if cfg.Poll == 0 {
		cfg.Poll = 50 * time.Millisecond
	}
	return &Tracker{cfg: cfg, db: db, admin: admin, kopts: kopts}
}

// Queries is how many PostgreSQL queries the tracker has made.
func (t *Tracker) Queries() int64 { return t.queries.Load() }

func (t *Tracker) refsTopics() []string {
	out := make([]string, len(t.cfg.Aggregates))
	for i, a := range t.cfg.Aggregates {
		out[i] = wire.RefsTopic(t.cfg.TopicPrefix, a)
	}
	return out
}

// Stage is the position of one stage.
type Stage struct {
	LSN      string `json:"lsn,omitempty"` // everything committed before it has passed the stage
	Lag      int64  `json:"lag"`           // records (map, build) or bytes (stream) not yet processed
	CaughtUp bool   `json:"caught_up"`
}

// Watermarks is the answer of Current.
type Watermarks struct {
	WALLSN string `json:"wal_lsn"` // pg_current_wal_lsn() when read
	Stream Stage  `json:"stream"`
	Map    Stage  `json:"map"`
	Build  Stage  `json:"build"`
}

// snapshotDone reports whether the streamer finished the slot's initial
// snapshot: its marker in <prefix>.state (key snapshot/<slot>) says done.
// Until then the slot's confirmed LSN (its consistent point) overstates
// progress: snapshot rows may not be in Kafka yet. A true answer is cached.
func (t *Tracker) snapshotDone(ctx context.Context) (bool, error) {
	if t.snapDone.Load() {
		return true, nil
	}
	topic := wire.StateTopic(t.cfg.TopicPrefix)
	ends, err := t.ends(ctx, []string{topic})
	if err != nil {
		return false, err
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Offset == 0 {
		return false, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, t.kopts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	key := wire.SnapshotKey(t.cfg.Slot)
	done := false
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		last := int64(-1)
		fs.EachRecord(func(r *kgo.Record) {
			last = r.Offset
			if string(r.Key) == key {
				var m wire.SnapshotMarker
				done = json.Unmarshal(r.Value, &m) == nil && m.Done
			}
		})
		if last >= end.Offset-1 {
			break
		}
	}
	if done {
		t.snapDone.Store(true)
	}
	return done, nil
}

// SnapshotComplete reports whether the initial snapshot is complete (true
// when there is none: snapshot_mode never).
func (t *Tracker) SnapshotComplete(ctx context.Context) (bool, error) {
	if !t.cfg.Snapshot {
		return true, nil
	}
	return t.snapshotDone(ctx)
}

// walLSN is the server's WAL position: pg_current_wal_lsn(), or on a hot
// standby (16+, where pg_current_wal_lsn() fails) the replayed position,
// in the primary's LSN space, so read-your-writes LSNs taken on the
// primary compare with a standby slot's confirmed position.
const walLSN = `(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)`

// SlotLSN returns the slot's confirmed_flush_lsn and the server's current
// WAL LSN (walLSN).
func (t *Tracker) SlotLSN(ctx context.Context) (confirmed, current uint64, err error) {
	t.queries.Add(1)
	var c *string
	var cur string
	err = t.db.QueryRow(ctx, `SELECT (SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1), `+walLSN+`::text`, t.cfg.Slot).Scan(&c, &cur)
	if err != nil {
		return 0, 0, fmt.Errorf("read slot %s: %w", t.cfg.Slot, err)
	}
	if current, err = wire.ParseLSN(cur); err != nil {
		return 0, 0, err
	}
	if c == nil {
		return 0, current, fmt.Errorf("replication slot %s does not exist: is `decant stream` (or run) started?", t.cfg.Slot)
	}
	confirmed, err = wire.ParseLSN(*c)
	return confirmed, current, err
}

// lag returns how many records the group has not committed below ends.
func (t *Tracker) lag(ctx context.Context, group string, topics []string, ends kadm.ListedOffsets) (int64, error) {
	committed, err := t.admin.FetchOffsetsForTopics(ctx, group, topics...)
	if err != nil {
		return 0, fmt.Errorf("read committed offsets of group %s: %w", group, err)
	}
	var lag int64
	var firstErr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			if firstErr == nil {
				firstErr = o.Err
			}
			return
		}
		c, ok := committed.Lookup(o.Topic, o.Partition)
		at := int64(0)
		if ok && c.Err == nil && c.At >= 0 {
			at = c.At
		}
		if o.Offset > at {
			lag += o.Offset - at
		}
	})
	return lag, firstErr
}

func (t *Tracker) ends(ctx context.Context, topics []string) (kadm.ListedOffsets, error) {
	if len(topics) == 0 {
		return kadm.ListedOffsets{}, nil
	}
	ends, err := t.admin.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	// A topic that does not exist yet holds nothing to wait for.
	for topic, ps := range ends {
		for p, o := range ps {
			if o.Err != nil && isUnknownTopic(o.Err) {
				delete(ps, p)
			}
		}
		if len(ps) == 0 {
			delete(ends, topic)
		}
	}
	return ends, nil
}

// Current reads every stage's position once.
func (t *Tracker) Current(ctx context.Context) (Watermarks, error) {
	var w Watermarks
	confirmed, current, err := t.SlotLSN(ctx)
	if err != nil {
		return w, err
	}
	w.WALLSN = wire.FormatLSN(current)
	w.Stream = Stage{LSN: wire.FormatLSN(confirmed), Lag: int64(current - min(current, confirmed)), CaughtUp: confirmed >= current}
	rawEnds, err := t.ends(ctx, t.cfg.RawTopics)
	if err != nil {
		return w, err
	}
	if w.Map.Lag, err = t.lag(ctx, t.cfg.Group+".map", t.cfg.RawTopics, rawEnds); err != nil {
		return w, err
	}
	w.Map.CaughtUp = w.Map.Lag == 0
	if w.Map.CaughtUp {
		w.Map.LSN = w.Stream.LSN
	}
	refsEnds, err := t.ends(ctx, t.refsTopics())
	if err != nil {
		return w, err
	}
	if w.Build.Lag, err = t.lag(ctx, t.cfg.Group+".build", t.refsTopics(), refsEnds); err != nil {
		return w, err
	}
	w.Build.CaughtUp = w.Build.Lag == 0 && w.Map.CaughtUp
	if w.Build.CaughtUp {
		w.Build.LSN = w.Map.LSN
	}
	return w, nil
}

// Wait blocks until every change committed at or before lsn has passed
// every stage (see the package doc), or ctx ends.
func (t *Tracker) Wait(ctx context.Context, lsn uint64) error {
	// 1. The stream stage has everything ≤ lsn in Kafka: the initial
	// snapshot is complete and the slot confirmed lsn.
	for {
		confirmed, ok := t.streamed(ctx)
		if ok && confirmed >= lsn {
			break
		}
		if !ctxtime.Sleep(ctx, t.cfg.Poll) {
			return fmt.Errorf("waiting for the streamer to confirm %s: %w", wire.FormatLSN(lsn), ctx.Err())
		}
	}
	return t.drained(ctx)
}

// Reached waits, as Wait does, for every change the streamer has
// confirmed when it is called, and returns that position: every change
// committed at or before it has passed every stage. It waits for the
// first confirmation, and returns at most then, when want does not hold
// for it; one call serves any number of waiters (those whose LSN the
// returned position reaches).
func (t *Tracker) Reached(ctx context.Context, want func(confirmed uint64) bool) (uint64, error) {
	for {
		confirmed, ok := t.streamed(ctx)
		if ok && want(confirmed) {
			return confirmed, t.drained(ctx)
		}
		if !ctxtime.Sleep(ctx, t.cfg.Poll) {
			return 0, ctx.Err()
		}
	}
}

// streamed returns the slot's confirmed position once the initial
// snapshot (when there is one) is complete; ok is false until then, or
// when they cannot be read.
func (t *Tracker) streamed(ctx context.Context) (confirmed uint64, ok bool) {
	confirmed, _, err := t.SlotLSN(ctx)
	if err != nil {
		return 0, false
	}
	if done, err := t.snapshotDone(ctx); err != nil || !done && t.cfg.Snapshot {
		return 0, false
	}
	return confirmed, true
}

// drained waits until the map group, then the build group, reach the end
// offsets of their topics read once the previous step holds (steps 2 and 3
// of the package doc).
func (t *Tracker) drained(ctx context.Context) error {
	steps := []struct {
		stage  string
		topics []string
	}{{"map", t.cfg.RawTopics}, {"build", t.refsTopics()}}
	for _, s := range steps {
		ends, err := t.ends(ctx, s.topics)
		for err != nil {
			if !ctxtime.Sleep(ctx, t.cfg.Poll) {
				return fmt.Errorf("waiting for the %s stage: %w", s.stage, err)
			}
			ends, err = t.ends(ctx, s.topics)
		}
		began, first := time.Now(), int64(-1)
		for {
			lag, err := t.lag(ctx, t.cfg.Group+"."+s.stage, s.topics, ends)
			if err == nil && lag == 0 {
				break
			}
			poll := t.cfg.Poll
			if err == nil {
				if first < 0 {
					began, first = time.Now(), lag
				}
				poll = nextPoll(t.cfg.Poll, first, lag, time.Since(began))
			}
			if !ctxtime.Sleep(ctx, poll) {
				return fmt.Errorf("waiting for the %s stage (%d records behind): %w", s.stage, lag, ctx.Err())
			}
		}
	}
	return nil
}

// nextPoll returns how long drained sleeps before it reads a stage's lag
// again: the time the lag would take to reach zero at the rate it fell
// since the first reading (first, elapsed ago), kept between a tenth of
// poll (at least 10ms) and poll. The end offsets are read once per step,
// so the lag only falls. A waiter polling every second through a long
// initial load (finishLoads) then learns that the last records passed
// within about a tenth of a second, not up to a whole second later.
func nextPoll(poll time.Duration, first, lag int64, elapsed time.Duration) time.Duration {
	if lag <= 0 || first <= lag || elapsed <= 0 {
		return poll
	}
	eta := time.Duration(float64(elapsed) * float64(lag) / float64(first-lag))
	return min(max(eta, poll/10, 10*time.Millisecond), poll)
}
