package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/wire"
)

// ensureTopic creates topic when it is missing (wire.EnsureTopic), with
// the partitions and replication factor of cfg.
func ensureTopic(ctx context.Context, adm *kadm.Client, cfg *Config, topic string, configs map[string]string) error {
	return wire.EnsureTopic(ctx, adm, topic, int32(cfg.Partitions), int16(cfg.ReplicationFactor), configs)
}

// producerOpts are the producer settings of every resolver client: every
// ref is acknowledged by all in-sync replicas, and Produce blocks when
// maxBuffered records are unacknowledged (backpressure for fan-outs). The
// default partitioner hashes the key, so all refs of one id share a
// partition.
func producerOpts(maxBuffered int) []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(maxBuffered),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()), // kafka.compression overrides it
	}
}

// acks collects the outcome of asynchronous produces: the first error wins.
type acks struct {
	mu  sync.Mutex
	err error
}

func (a *acks) promise(r *kgo.Record, err error) {
	if err == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err == nil {
		a.err = fmt.Errorf("produce to %s: %w", r.Topic, err)
	}
}

func (a *acks) first() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// endOffsets returns the end offset of every partition of topic that has
// records (end > start).
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			if !errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
				lerr = fmt.Errorf("end offset of %s/%d: %w", topic, o.Partition, o.Err)
			}
			return
		}
		s, ok := starts.Lookup(topic, o.Partition)
		if ok && s.Err == nil && o.Offset > s.Offset {
			out[o.Partition] = o.Offset
		}
	})
	return out, lerr
}

// scanKeys calls fn with the key of every non-tombstone record of topic up
// to the end offsets it has when the scan starts. It reads with its own
// client (no group) and holds one fetch in memory.
func scanKeys(ctx context.Context, opts []kgo.Opt, topic string, fn func(key []byte) error) error {
	adm0, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	ends, err := endOffsets(ctx, kadm.NewClient(adm0), topic)
	adm0.Close()
	if err != nil || len(ends) == 0 {
		return err
	}
	parts := map[int32]kgo.Offset{}
	for p := range ends {
		parts[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("read %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var cbErr error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := ends[r.Partition]
			if !ok || r.Offset >= end || cbErr != nil {
				return
			}
			if r.Value != nil {
				cbErr = fn(r.Key)
			}
			if r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
		})
		if cbErr != nil {
			return cbErr
		}
	}
	return nil
}

// runSessions runs session until ctx ends, restarting it after an error
// with a backoff (1s doubling to 30s, reset after a session that ran a
// minute). A session that fails did not commit its batch, so the batch is
// consumed again: this is the single retry path of each stage.
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

// groupClient is the consumer of a stage: group member, manual commits
// after acknowledgement, no rebalance while a batch is in hand.
func groupClient(opts []kgo.Opt, group string, topics []string) (*kgo.Client, error) {
	opts = append(opts,
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(250*time.Millisecond),
		// Bounded fetch buffers: a backlog of millions of records must not
		// become millions of records in memory (issue 5, fan-out test).
		kgo.FetchMaxBytes(1<<20), kgo.FetchMaxPartitionBytes(256<<10), kgo.MaxConcurrentFetches(2),
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
