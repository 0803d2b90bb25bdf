package streamer

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/wire"
)

// A new snapshot (a new slot: the first, one redone after a crash
// mid-snapshot, or one after the slot was dropped) is a complete image of
// every published table, but a raw topic may still hold records of an
// earlier image: rows deleted since then would keep their last record, in
// the compacted topic, forever. After the snapshot has written its rows,
// the streamer tombstones every key whose last record predates the
// snapshot (the sweep). Only topics that held records before the snapshot
// are read back, so a first start costs nothing; the sweep holds the keys
// of the earlier image of one table in memory at a time.

// priorEnds returns, for the partitions of topic that hold records, their
// end offsets: records below them predate the snapshot about to be
// written. Empty when the topic is.
func (s *Streamer) priorEnds(ctx context.Context, topic string) (map[int32]int64, error) {
	starts, err := s.admin.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := s.admin.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	prior := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if st, ok := starts.Lookup(topic, o.Partition); ok && o.Offset > st.Offset {
			prior[o.Partition] = o.Offset
		}
	})
	return prior, nil
}

// sweep tombstones the keys of topic whose last record is below prior (an
// earlier image's row that the snapshot just written did not see), through
// the snapshot's mark; the snapshot's rows must be acknowledged first. It
// returns how many keys it tombstoned.
func (s *Streamer) sweep(ctx context.Context, topic string, prior map[int32]int64, mark *txnMark, cp uint64) (int, error) {
	ends, err := s.admin.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	parts := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition → end offset still to reach
	for p := range prior {
		if e, ok := ends.Lookup(topic, p); ok && e.Offset > 0 {
			parts[p] = kgo.NewOffset().AtStart()
			left[p] = e.Offset
		}
	}
	if len(parts) == 0 {
		return 0, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, s.cfg.Kafka...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	stale := map[string]struct{}{} // keys whose last record so far predates the snapshot
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return 0, fmt.Errorf("read %s back: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return 0, fmt.Errorf("read %s back: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < prior[r.Partition] && r.Value != nil && !bytes.Equal(r.Key, wire.TruncateKey) {
				stale[string(r.Key)] = struct{}{}
			} else {
				delete(stale, string(r.Key))
			}
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	for k := range stale {
		s.produce(ctx, record{topic: topic, key: []byte(k), op: wire.OpDelete}, mark, cp)
	}
	return len(stale), nil
}
