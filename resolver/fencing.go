package resolver

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/decant-cdc/decant/internal/fence"
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

// fenceLease is how long after a heartbeat was sent a member may still
// write: two thirds of the session timeout, so that a write checked
// within the lease reaches its server well before the coordinator can
// have handed the partitions to another member (session timeout after
// that heartbeat reached it).
func fenceLease(session time.Duration) time.Duration { return session * 2 / 3 }

// fenceOpts ties f to a build stage group client: the writers of assigned
// partitions are opened before any of their refs is polled (fencing the
// previous owners), revoked partitions' writers closed, and lost
// partitions or a failed group session lose f; answered heartbeats renew
// its lease.
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
		kgo.OnPartitionsAssigned(func(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
			started := time.Now()
			if err := fs.OpenWriters(ctx, f, group, ids(assigned)); err != nil {
				// Every write of the session now fails: it ends and a new
				// one starts.
				log.Warn("cannot open the fenced writers of the assigned partitions; restarting the session", "err", err)
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

// fenceHooks renews a fence's lease on every answered heartbeat and loses
// it when the group session fails.
type fenceHooks struct{ f *fence.Fence }

// OnGroupManageError implements kgo.HookGroupManageError.
func (h fenceHooks) OnGroupManageError(err error) { h.f.Lose(err) }

// OnBrokerE2E implements kgo.HookBrokerE2E. A heartbeat answered without
// a transport error renews the lease from when it was written; an answer
// that says the member is gone ends the session (OnGroupManageError).
func (h fenceHooks) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if (key != int16(kmsg.Heartbeat) && key != int16(kmsg.ConsumerGroupHeartbeat)) || e.Err() != nil {
		return
	}
	h.f.Renew(time.Now().Add(-e.DurationE2E()))
}
