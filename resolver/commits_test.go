package resolver

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/decant-cdc/decant/wire"
)

// TestAsyncCommits: a stage's offset commit does not hold its loop.
// commit returns while kfake holds the broker's answer; wait returns only
// once the answer came, and the offsets are then committed. A partition
// error in an answer is returned by failed and by wait, which ends the
// session (a synchronous commit returned it at once).
func TestAsyncCommits(t *testing.T) {
	c, ctx, seeds, prod := rawCluster(t, 2, 30*time.Second)
	const n = 10
	for i := range n {
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := groupClient([]kgo.Opt{seeds}, "g", []string{"raw"}, 10*time.Second, mapFetchMinBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer leaveGroup(cl)
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollRecords(ctx, n)
		if err := fetchErr(fs); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, fs.Records()...)
	}

	// The first commit's answer is held until release is closed.
	release := make(chan struct{})
	var held atomic.Int32
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.Add(1) == 1 {
			c.SleepControl(func() { <-release })
		}
		c.DropControl()
		return nil, nil, false // kfake answers it as usual
	})
	var commits asyncCommits
	issued := make(chan struct{})
	go func() {
		commits.commit(ctx, cl, recs)
		close(issued)
	}()
	select {
	case <-issued:
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("commit waited for the broker's answer")
	}
	for held.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the commit never reached the broker")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waited := make(chan error, 1)
	go func() { waited <- commits.wait() }()
	select {
	case err := <-waited:
		t.Fatalf("wait returned (%v) before the broker answered", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-waited; err != nil {
		t.Fatalf("wait: %v", err)
	}
	adm := kadm.NewClient(prod)
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
	if sum != n {
		t.Fatalf("committed offsets add up to %d, want %d (every record)", sum, n)
	}

	// A refused commit is seen by failed and wait.
	c.ControlKey(int16(kmsg.OffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	commits.commit(ctx, cl, recs)
	if err := commits.wait(); !errors.Is(err, kerr.OffsetMetadataTooLarge) {
		t.Fatalf("wait after a refused commit: %v, want %v", err, kerr.OffsetMetadataTooLarge)
	}
	if err := commits.failed(); !errors.Is(err, kerr.OffsetMetadataTooLarge) {
		t.Fatalf("failed after a refused commit: %v, want %v", err, kerr.OffsetMetadataTooLarge)
	}
	// The stages' deferred waitInto: the loop's own error comes first,
	// else the commit's.
	var loopErr error
	commits.waitInto(&loopErr)
	if !errors.Is(loopErr, kerr.OffsetMetadataTooLarge) {
		t.Fatalf("waitInto with no error of the loop: %v, want %v", loopErr, kerr.OffsetMetadataTooLarge)
	}
	first := errors.New("the loop's error")
	loopErr = first
	commits.waitInto(&loopErr)
	if loopErr != first {
		t.Fatalf("waitInto replaced the loop's error with %v", loopErr)
	}
}

// TestConsumeCommitsTogetherUnderBacklog: consume commits the offsets of
// consecutive batches together while more records are already fetched,
// at once for a batch with nothing behind it, and before the session
// ends: after a handled batch whose successor failed, and on a stop. It
// checks the broker's committed offsets, and counts the OffsetCommit
// requests kfake receives.
func TestConsumeCommitsTogetherUnderBacklog(t *testing.T) {
	c, ctx, seeds, prod := rawCluster(t, 1, 60*time.Second)
	produce := func(from, to int) {
		t.Helper()
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")})
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var commitRequests atomic.Int64
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		commitRequests.Add(1)
		c.KeepControl()
		return nil, nil, false
	})
	committedAt := func() int64 {
		t.Helper()
		offs, err := kadm.NewClient(prod).FetchOffsets(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		at := int64(0)
		offs.Each(func(o kadm.OffsetResponse) { at = max(at, o.At) })
		return at
	}
	// session runs consume until handled reaches stopAt, or until handle
	// fails at failAt; it returns consume's error and the batches handled.
	session := func(stopAt, failAt int64, pause time.Duration) (error, int) {
		t.Helper()
		cl, err := groupClient([]kgo.Opt{seeds}, "g", []string{"raw"}, 10*time.Second, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer leaveGroup(cl)
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		batches := 0
		var handled int64
		gens := &generations{c: prometheus.NewCounter(prometheus.CounterOpts{Name: "g"})}
		err = consume(sctx, cl, gens, 50, func(recs []*kgo.Record) (int64, error) {
			for _, r := range recs {
				if r.Offset == failAt {
					return 0, errors.New("this batch fails")
				}
			}
			time.Sleep(pause)
			batches++
			return 0, nil
		}, func(recs []*kgo.Record, _ int64) {
			handled = recs[len(recs)-1].Offset + 1
			if handled >= stopAt {
				stop()
			}
		})
		return err, batches
	}

	// A backlog of 4,000 records, 50 a batch, 2 ms each: 80 batches
	// handled in about 160 ms, committed together in a few requests, and
	// all of them once consume stopped.
	produce(0, 4000)
	err, batches := session(4000, -1, 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := committedAt(); got != 4000 {
		t.Fatalf("committed up to %d after a stop, want 4000 (every handled record)", got)
	}
	t.Logf("%d offset commits for %d batches under a backlog", commitRequests.Load(), batches)
	if n := commitRequests.Load(); n == 0 || n > int64(batches)/4 {
		t.Fatalf("%d offset commits for %d batches under a backlog, want between 1 and a quarter of them", n, batches)
	}

	// A trickle: one record at a time, each handled alone and committed
	// at once, without waiting for commitEvery.
	produce(4000, 4001)
	commitRequests.Store(0)
	done := make(chan error, 1)
	go func() {
		err, _ := session(4005, -1, 0)
		done <- err
	}()
	for i := 4001; i <= 4005; i++ {
		deadline := time.Now().Add(10 * time.Second)
		for committedAt() < int64(i) {
			if time.Now().After(deadline) {
				t.Fatalf("record %d handled but not committed within 10 s", i-1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		// Committed while consume is still running and has no reason
		// to hold the offsets: one commit per record.
		if n := commitRequests.Load(); n != int64(i-4000) {
			t.Fatalf("%d offset commits after %d trickled records, want one each", n, i-4000)
		}
		if i < 4005 {
			produce(i, i+1)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A backlog whose batch at offset 6,000 fails: the batches handled
	// before it are committed, it and those after it are not.
	produce(4005, 8000)
	err, _ = session(8000, 6000, time.Millisecond)
	if err == nil {
		t.Fatal("consume returned nil after handle failed")
	}
	if got := committedAt(); got < 5950 || got > 6000 {
		t.Fatalf("committed up to %d after the batch holding offset 6000 failed, want the batch before it (5950–6000)", got)
	}
}

// rawCluster starts a one-broker kfake cluster with a topic "raw" of the
// given partitions, and returns it, a context that ends after timeout,
// the seed option for the test's clients and a producer to "raw"; all of
// them end with the test.
func rawCluster(t *testing.T, partitions int32, timeout time.Duration) (*kfake.Cluster, context.Context, kgo.Opt, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "raw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	seeds := kgo.SeedBrokers(c.ListenAddrs()...)
	prod, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic("raw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return c, ctx, seeds, prod
}

// TestWaitBuiltRetriesCoordinatorErrors: WaitBuilt waits through the
// retriable errors of a coordinator that is not ready (a broker just
// started answered COORDINATOR_NOT_AVAILABLE, and `decant backfill`
// failed), and returns once the offsets it waits for are committed.
func TestWaitBuiltRetriesCoordinatorErrors(t *testing.T) {
	const prefix, agg = "p", "a"
	topic := wire.RefsTopic(prefix, agg)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seeds := kgo.SeedBrokers(c.ListenAddrs()...)
	cl, err := kgo.NewClient(seeds)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 5, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, "g.build", offs); err != nil {
		t.Fatal(err)
	}

	const failures = 3
	var refused atomic.Int32
	c.ControlKey(int16(kmsg.OffsetFetch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		if refused.Add(1) > failures {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		req := kr.(*kmsg.OffsetFetchRequest)
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.Version = req.Version
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		for _, g := range req.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, kerr.CoordinatorNotAvailable.Code
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	// No client-side retries: each refusal reaches WaitBuilt.
	cfg := Config{Kafka: []kgo.Opt{seeds, kgo.RequestRetries(0)}, TopicPrefix: prefix, Group: "g"}
	b := &Backfilled{Aggregate: agg, Starts: map[int32]int64{0: 0}, Ends: map[int32]int64{0: 5}}
	var done, total int64
	if err := WaitBuilt(ctx, cfg, b, func(d, tot int64) { done, total = d, tot }); err != nil {
		t.Fatalf("WaitBuilt: %v", err)
	}
	if got := refused.Load(); got <= failures {
		t.Errorf("the broker answered %d offset fetches, want more than the %d refused", got, failures)
	}
	if done != 5 || total != 5 {
		t.Errorf("progress %d of %d, want 5 of 5", done, total)
	}
}
