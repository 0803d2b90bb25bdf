package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// runSessions runs session until ctx ends, restarting it after an error
// with a backoff (1s doubling to 30s, reset after a session that ran a
// minute). A session that fails did not commit its batch, so the batch is
// consumed again: this is the single retry path of each stage. A
// *MappingError is returned instead: retrying cannot fix it.
func runSessions(ctx context.Context, log *slog.Logger, session func(context.Context) error) error {
	backoff := time.Second
	for {
		started := time.Now()
		err := session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			return nil
		}
		if me := (*MappingError)(nil); errors.As(err, &me) {
			return err // no retry can fix it: the stage stops (cmd/decant reports it)
		}
		if time.Since(started) > time.Minute {
			backoff = time.Second
		}
		log.Warn("session ended; restarting from the last committed offsets", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// A stage's fetch waits at the broker for fetchMaxWait or until it has
// minBytes of records (mapFetchMinBytes, buildFetchMinBytes), so that a
// trickle of changes is handled in batches rather than one by one.
const fetchMaxWait = 250 * time.Millisecond

// mapFetchMinBytes: a few raw records.
const mapFetchMinBytes = 4 << 10

// buildFetchMinBytes is larger: each poll of the build stage ends one
// Kafka transaction per refs partition it holds refs of (the fenced
// writers of issue 15), so the polls a second, not the changes, set the
// broker's transaction work. At 1,100 changes a second
// (BenchmarkFreshness at a fixed rate, twice each, alternating), 16 KiB
// instead of 4 cut Kafka's CPU over the window from 22.8 and 20.8 to 14.2
// and 14.9 CPU-seconds and the aggregate topic's p99 from 1,011 and 537 ms
// to 278 and 303 ms, for a p50 of 97–105 ms instead of 53–59. 8 KiB gave
// 17.2 CPU-seconds and 513 ms, 32 KiB 12.7 and 468 ms (a p50 of 183 ms).
// Under a backlog both fill at once; at a trickle fetchMaxWait bounds the
// wait, as before.
const buildFetchMinBytes = 16 << 10

// groupClient is the consumer of a stage: group member, manual commits
// after acknowledgement, no rebalance while a batch is in hand, fetches
// that wait for minBytes or fetchMaxWait.
func groupClient(opts []kgo.Opt, group string, topics []string, session time.Duration, minBytes int32) (*kgo.Client, error) {
	opts = append(opts,
		kgo.ConsumerGroup(group),
		kgo.SessionTimeout(session),
		kgo.HeartbeatInterval(min(3*time.Second, session/3)),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.FetchMinBytes(minBytes),
		// Bounded fetch buffers: a backlog of millions of records must not
		// become millions of records in memory (issue 5, fan-out test).
		// At most 2 fetches of 4 MiB are buffered. A fetch costs Kafka
		// and franz-go per request as much as per byte, and a snapshot
		// fills one table's partitions at a time: reading back 1.3 M raw
		// records (530 MB) at 1 MiB and 256 KiB a partition cost Kafka
		// 1.2–1.6 CPU-seconds and the consumer 1.7–1.9, at these limits
		// 0.55 and 1.2 (docs/performance.md, thirty-third pass).
		kgo.FetchMaxBytes(4<<20), kgo.FetchMaxPartitionBytes(1<<20), kgo.MaxConcurrentFetches(2),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// leaveGroup leaves the group within a bounded time, then closes: a plain
// Close waits for an in-flight join, which the broker may hold until a
// member killed with -9 times out (45s), making SIGTERM slow.
func leaveGroup(cl *kgo.Client) {
	cl.AllowRebalance()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = cl.LeaveGroupContext(ctx)
	cancel()
	cl.Close()
}

// poll polls at most maxRecords records until pctx ends (pctx may end
// before ctx, the session's, to stop waiting). ended is true when ctx
// ended; a fetch error ends the session.
func poll(ctx, pctx context.Context, cl *kgo.Client, maxRecords int) (recs []*kgo.Record, ended bool, err error) {
	recs, _, ended, err = pollBehind(ctx, pctx, cl, maxRecords)
	return recs, ended, err
}

// pollBehind is poll that also says whether the broker held more records
// than it returned (a partition's high watermark past its last record)
// or more are fetched already: a backlog.
func pollBehind(ctx, pctx context.Context, cl *kgo.Client, maxRecords int) (recs []*kgo.Record, behind, ended bool, err error) {
	fs := cl.PollRecords(pctx, maxRecords)
	if ctx.Err() != nil {
		return nil, false, true, nil
	}
	if err := fetchErr(fs); err != nil {
		return nil, false, false, err
	}
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if n := len(p.Records); n > 0 && p.Records[n-1].Offset+1 < p.HighWatermark {
			behind = true
		}
	})
	return fs.Records(), behind || cl.BufferedFetchRecords() > 0, false, nil
}

// consume is the loop of a stage's session: it polls cl for at most
// maxRecords records at a time until ctx ends (then it returns nil).
// handle gets each non-empty poll; only when it returns nil are the
// records' offsets committed (at-least-once), then committed gets the
// records and handle's count. An error of handle, of a fetch or of the commit ends the session,
// uncommitted, for runSessions to restart. Commits are asynchronous
// (asyncCommits): the next batch is polled and handled while the last
// one's commit is on its way.
//
// Under a backlog (the broker held more records than a poll returned) the
// offsets of consecutive batches are committed together, at most
// commitEvery apart: an initial load's map stage handled 635 batches of
// skipped snapshot rows in 14 s, each with its own offset commit, a
// request the group coordinator writes to __consumer_offsets (replicated
// on a real cluster) and about a millisecond of the broker's CPU here.
// A batch with nothing fetched behind it is committed at once, so a
// trickle of changes, and /v1/wait behind it, waits for no interval. No
// rebalance is allowed while offsets wait, and they are committed before
// the session ends on anything but a failed commit.
func consume(ctx context.Context, cl *kgo.Client, gens *generations, maxRecords int, handle func([]*kgo.Record) (int64, error), committed func([]*kgo.Record, int64)) (err error) {
	// Commits outlive a stop by up to 5 s: a stop is no reason to handle
	// the records of a commit in flight, or of offsets held, again.
	cctx, ccancel := context.WithCancel(context.WithoutCancel(ctx))
	defer ccancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(5*time.Second, ccancel) })()
	var commits asyncCommits
	defer commits.waitInto(&err)
	var held offsets
	last := time.Now()
	flush := func() {
		if held.empty() {
			return
		}
		commits.commitOffsets(cctx, cl, held.take())
		last = time.Now()
		cl.AllowRebalance()
	}
	defer func() {
		if commits.failed() == nil {
			flush() // waitInto, deferred before, waits for it
		}
	}()
	for {
		// While offsets wait, the poll waits no longer than they may.
		pctx, stop := ctx, func() {}
		if !held.empty() {
			var cancel context.CancelFunc
			pctx, cancel = context.WithCancel(ctx)
			t := time.AfterFunc(commitEvery-time.Since(last), cancel)
			stop = func() { t.Stop(); cancel() }
		}
		recs, behind, ended, err := pollBehind(ctx, pctx, cl, maxRecords)
		stop()
		if ended || err != nil {
			return err
		}
		if err := commits.failed(); err != nil {
			return err
		}
		gens.observe(cl)
		if len(recs) == 0 {
			flush()
			cl.AllowRebalance()
			continue
		}
		n, err := handle(recs)
		if err != nil {
			return err
		}
		held.add(recs)
		if !behind || time.Since(last) >= commitEvery {
			flush()
		}
		committed(recs, n)
	}
}

// commitEvery is the longest a stage holds the offsets of handled batches
// to commit them together under a backlog (consume). Kafka's consumers
// commit every 5 s by default and Kafka Streams every 100 ms with exactly
// once; /v1/wait, which reads committed offsets, is late by at most this
// much, and only while a backlog is read.
const commitEvery = 100 * time.Millisecond

// offsets are the offsets after handled records, the largest per
// partition, as kgo.Client.CommitRecords takes them.
type offsets map[string]map[int32]kgo.EpochOffset

func (o *offsets) add(recs []*kgo.Record) {
	if *o == nil {
		*o = offsets{}
	}
	for _, r := range recs {
		ps := (*o)[r.Topic]
		if ps == nil {
			ps = map[int32]kgo.EpochOffset{}
			(*o)[r.Topic] = ps
		}
		eo := kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		if at, ok := ps[r.Partition]; ok && eo.Less(at) {
			continue
		}
		ps[r.Partition] = eo
	}
}

func (o offsets) empty() bool { return len(o) == 0 }

// take returns the offsets and forgets them.
func (o *offsets) take() map[string]map[int32]kgo.EpochOffset {
	t := *o
	*o = nil
	return t
}

// asyncCommits commits the offsets of handled records without waiting
// for the answer, so that a stage's loop polls on at once: with
// synchronous commits the build stage's loop waited for 1,319 commits in
// a minute at 973 changes/s (p50 8 ms, p99 68 ms each), and every ref
// fetched meanwhile waited with it. Order and rebalances stay safe
// by franz-go's rules: a commit waits for the one before it, and a
// rebalance's JoinGroup waits for every commit in flight, so a new owner
// of a partition reads the offsets this member committed. A failed commit
// is seen by failed or wait and ends the session; the records after it
// are then consumed again (at least once).
type asyncCommits struct {
	pending sync.WaitGroup
	mu      sync.Mutex
	err     error
}

// commit commits the offsets after recs (the largest per partition, as
// kgo.Client.CommitRecords does).
func (a *asyncCommits) commit(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) {
	var o offsets
	o.add(recs)
	a.commitOffsets(ctx, cl, o.take())
}

// commitOffsets commits offsets without waiting for the answer.
func (a *asyncCommits) commitOffsets(ctx context.Context, cl *kgo.Client, offsets map[string]map[int32]kgo.EpochOffset) {
	a.pending.Add(1)
	cl.CommitOffsets(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		defer a.pending.Done()
		if err == nil {
			err = commitResponseErr(resp)
		}
		if err != nil {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.err == nil {
				a.err = fmt.Errorf("commit offsets: %w", err)
			}
		}
	})
}

// commitResponseErr is the first partition error of a commit's response:
// franz-go retries the retryable group errors itself, so any is final.
func commitResponseErr(resp *kmsg.OffsetCommitResponse) error {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return err
			}
		}
	}
	return nil
}

// failed is the first error of the commits answered so far.
func (a *asyncCommits) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// wait waits for every commit issued and returns the first error.
func (a *asyncCommits) wait() error {
	a.pending.Wait()
	return a.failed()
}

// waitInto waits like wait and keeps its error in *err unless *err
// holds one already: the deferred end of a stage's loop.
func (a *asyncCommits) waitInto(err *error) {
	if werr := a.wait(); *err == nil {
		*err = werr
	}
}

// fetchErr returns the first fetch error that is not a cancellation.
// franz-go retries retriable errors itself; what it reports is worth a
// session restart.
func fetchErr(fs kgo.Fetches) error {
	var first error
	fs.EachError(func(t string, p int32, err error) {
		if first == nil && !errors.Is(err, context.Canceled) {
			first = fmt.Errorf("fetch %s/%d: %w", t, p, err)
		}
	})
	return first
}
