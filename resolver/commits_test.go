package resolver

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAsyncCommits: a stage's offset commit does not hold its loop.
// commit returns while kfake holds the broker's answer; wait returns only
// once the answer came, and the offsets are then committed. A partition
// error in an answer is returned by failed and by wait, which ends the
// session (a synchronous commit returned it at once).
func TestAsyncCommits(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seeds := kgo.SeedBrokers(c.ListenAddrs()...)
	prod, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic("raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
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
