package resolver

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/wire"
)

// ensureTopic creates topic when it is missing (wire.EnsureTopic), with
// the partitions and replication factor of cfg.
func ensureTopic(ctx context.Context, adm *kadm.Client, cfg *Config, topic string, configs map[string]string) error {
	return wire.EnsureTopic(ctx, adm, topic, int32(cfg.Partitions), int16(cfg.ReplicationFactor), int16(cfg.MinInsyncReplicas), configs)
}

// beforeJoining runs ensure with an admin client of its own, before a
// stage's group client exists: a group whose topics appear after it
// joined is rebalanced once per topic its leader later finds ("more
// topics to consume"), one metadata refresh apart — seen as 3 rebalances
// 5 s apart, 17 s before the map stage read its first record on a first
// start. Created first, every topic is assigned in the first generation.
func beforeJoining(ctx context.Context, opts []kgo.Opt, ensure func(*kadm.Client) error) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	return ensure(kadm.NewClient(cl))
}

// ensureRefsTopic creates a refs topic when it is missing, compacted
// (wire.RefsTopicConfigs), and makes an existing one compacted: refs topics
// created by earlier versions were deleted after 7 days, which loses the
// work of a build stage down longer than that.
func ensureRefsTopic(ctx context.Context, adm *kadm.Client, cfg *Config, topic string) error {
	configs := wire.RefsTopicConfigs()
	if err := ensureTopic(ctx, adm, cfg, topic, configs); err != nil {
		return err
	}
	var alter []kadm.AlterConfig
	for k, v := range configs {
		alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &v})
	}
	resp, err := adm.AlterTopicConfigs(ctx, alter, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		if r, err = resp.On(topic, nil); err == nil {
			err = r.Err
		}
	}
	if err != nil {
		return fmt.Errorf("make refs topic %s compacted: %w", topic, err)
	}
	return nil
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

// badRecord is a consumed record a stage cannot read: a raw record that is
// not a change event, or a ref whose key is not an id of its aggregate.
type badRecord struct {
	rec *kgo.Record
	err error
}

// deadLetterBad writes bad records to <prefix>.dlq with the record's key,
// its topic/partition/offset and why (acknowledged through a, with the
// batch), and logs one line for them: nothing can ever be made of such a
// record, so its offset is committed with the batch's once the dead
// letter is acknowledged.
func deadLetterBad(ctx context.Context, cl *kgo.Client, log *slog.Logger, prefix, stage string, bad []badRecord, a *acks) {
	if len(bad) == 0 {
		return
	}
	for _, b := range bad {
		r := b.rec
		key, value := wire.DeadLetter{Stage: stage, Topic: r.Topic, Record: fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset),
			Key: r.Key, ValueBytes: len(r.Value), Reason: b.err.Error()}.Encode()
		cl.Produce(ctx, &kgo.Record{Topic: wire.DLQTopic(prefix), Key: key, Value: value}, a.promise)
	}
	r := bad[0].rec
	log.Error("records that cannot be read; written to the dead-letter topic", "records", len(bad),
		"first", fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), "err", bad[0].err,
		"fix", "see the dead letters in "+wire.DLQTopic(prefix)+"; whatever wrote these records to "+r.Topic+" is not decant")
}
