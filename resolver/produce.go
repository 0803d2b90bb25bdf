package resolver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
