package resolver

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/wire"
)

// endOffsets returns the end offset of every partition of topic that has
// records (end > start); a topic that does not exist has none.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := allEndOffsets(ctx, adm, topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return map[int32]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	for p, end := range ends {
		if s, ok := starts.Lookup(topic, p); !ok || s.Err != nil || end <= s.Offset {
			delete(ends, p)
		}
	}
	return ends, nil
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
	cl, err := kgo.NewClient(append(append(wire.CommittedReader(), opts...),
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
			if !ok || cbErr != nil {
				return
			}
			if r.Offset < end && r.Value != nil && !r.Attrs.IsControl() {
				cbErr = fn(r.Key)
			}
			// Reading committed records, the one at end-1 may never come:
			// when the end offset was taken inside a transaction that then
			// aborted, its records are skipped and the first record seen
			// is the abort marker, at end or after. Any record at end-1 or
			// later means the partition is read (waiting for one exactly
			// at end-1 hung the map stage in a chaos run).
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
