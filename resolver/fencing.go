package resolver

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/decant-cdc/decant/internal/fence"
	"github.com/decant-cdc/decant/wire"
)

// fencerOf returns the sink's fencing part, or nil when nothing in it
// fences (no aggregate topic sink).
func fencerOf(s Sink) FencingSink {
	switch s := s.(type) {
	case Sinks:
		if s.fencing() {
			return s
		}
	case FencingSink:
		return s
	}
	return nil
}

// fenceLease is how long after a heartbeat that found the member in the
// group, with no rebalance under way, the member may still write: two
// thirds of the session timeout (and of franz-go's rebalance timeout,
// 60 s), so that a write checked within the lease reaches its server well
// before the coordinator can have handed the partitions to another member
// (a session timeout after that heartbeat, or a rebalance timeout after a
// rebalance that began after it).
func fenceLease(session time.Duration) time.Duration { return min(session, 60*time.Second) * 2 / 3 }

// fenceOpts ties f to a build stage group client: the writers of assigned
// partitions are opened before any of their refs is polled (fencing the
// previous owners), revoked partitions' writers closed, and lost
// partitions or a failed group session lose f. keepLease renews its
// lease.
func fenceOpts(f *fence.Fence, fs FencingSink, group string, log *slog.Logger) []kgo.Opt {
	ids := func(parts map[string][]int32) []string {
		var out []string
		for t, ps := range parts {
			for _, p := range ps {
				out = append(out, fence.WriterID(t, p))
			}
		}
		slices.Sort(out)
		return out
	}
	return []kgo.Opt{
		kgo.OnPartitionsAssigned(func(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
			started := time.Now()
			probeMembership(ctx, cl, f, group) // the lease of the new generation
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := fs.OpenWriters(octx, f, group, ids(assigned)); err != nil {
				// Every write of the session now fails: it ends and a new
				// one starts.
				log.Warn("cannot open the transactional writers of the assigned partitions; restarting the session. "+
					"Kafka transactions need a transaction state log the brokers can host "+
					"(transaction.state.log.replication.factor and transaction.state.log.min.isr at most the number of brokers); "+
					"resolver.fence: false writes without them", "err", err)
				f.Lose(err)
				return
			}
			log.Debug("fenced writers opened", "partitions", len(ids(assigned)), "took", time.Since(started).Round(time.Millisecond))
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
			f.Drop(ids(revoked)...)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			f.Lose(errors.New("the group session was lost"))
			f.Drop(ids(lost)...)
		}),
		kgo.WithHooks(fenceHooks{f}),
	}
}

// fenceHooks loses a fence when the group session fails.
type fenceHooks struct{ f *fence.Fence }

// OnGroupManageError implements kgo.HookGroupManageError.
func (h fenceHooks) OnGroupManageError(err error) { h.f.Lose(err) }

// probeMembership renews f's lease with a heartbeat of its own, sent with
// the member id and generation cl has now: answered without error, it
// proves the member was in the group, with no rebalance under way, when
// it was sent (franz-go's own heartbeats cannot be observed with their
// answers). Any error leaves the lease to run out.
func probeMembership(ctx context.Context, cl *kgo.Client, f *fence.Fence, group string) {
	member, generation := cl.GroupMetadata()
	if member == "" {
		return
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = group, member, generation
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // never hold an assignment callback long
	defer cancel()
	sent := time.Now()
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && resp.ErrorCode == 0 {
		f.Renew(sent)
	}
}

// keepLease probes the membership every interval until ctx ends.
func keepLease(ctx context.Context, cl *kgo.Client, f *fence.Fence, group string, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		probeMembership(ctx, cl, f, group)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// StopBeforeWriteEnv names a test hook: a build stage process with this
// variable set stops itself (SIGSTOP) once, just before it writes
// documents of which one contains the variable's value. It is how the
// end-to-end tests pause a member while it holds built documents, at a
// point no outside signal can choose (e2e TestZombieBuildMemberIsFenced).
const StopBeforeWriteEnv = "DECANT_TEST_STOP_BEFORE_WRITE"

var stopOnce sync.Once

func stopBeforeWrite(log *slog.Logger, docs []wire.Document) {
	marker := os.Getenv(StopBeforeWriteEnv)
	if marker == "" {
		return
	}
	for _, d := range docs {
		if bytes.Contains(d.Doc, []byte(marker)) {
			stopOnce.Do(func() {
				log.Warn("test hook: stopping before writing built documents", "env", StopBeforeWriteEnv, "id", string(d.ID), "version", d.Version)
				// Delivered to the whole process, not only this thread:
				// wait here until it is.
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				time.Sleep(100 * time.Millisecond)
			})
			return
		}
	}
}
