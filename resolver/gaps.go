package resolver

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// gapTracker finds records of raw topics that were compacted away before
// the map stage read them. Raw topics are compacted; a record the map stage
// has not read yet may be removed by the log cleaner once a newer record of
// its key exists and the record is older than the topic's
// min.compaction.lag.ms (wire.RawTopicConfigs). Such a record may have been
// the only one carrying an old foreign key (the before image of a move) or
// a delete, and the documents it concerned cannot be found any more. A
// removed record leaves a hole in the partition's offsets: the tracker
// compares each record's offset with the one expected (the group's
// committed offset, then the previous record's plus one), and the map
// stage rebuilds every document of the aggregates using a table whose raw
// topic has a hole, as for a TRUNCATE. A partition the group has no
// commit for (its first start, or its offsets expired after
// offsets.retention.minutes without a member) is read from its log start
// offset, which compaction does not move: records removed before the first
// one left are a hole too.
type gapTracker struct {
	mu   sync.Mutex
	next map[string]map[int32]int64 // topic → partition → expected offset
}

func newGapTracker() *gapTracker { return &gapTracker{next: map[string]map[int32]int64{}} }

// opts forget the partitions this member loses: another member may move
// their offsets before they come back.
func (g *gapTracker) opts() []kgo.Opt {
	forget := func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
		g.mu.Lock()
		defer g.mu.Unlock()
		for t, ps := range lost {
			for _, p := range ps {
				delete(g.next[t], p)
			}
		}
	}
	return []kgo.Opt{kgo.OnPartitionsRevoked(forget), kgo.OnPartitionsLost(forget)}
}

// gap is the first hole found in a partition of a topic.
type gap struct {
	partition int32
	from, to  int64 // offsets [from, to) are missing
	first     *kgo.Record
}

// check returns, by topic, the first hole in recs (polled in offset order
// per partition), and moves the expected offsets past recs. For a
// partition seen for the first time, committed is the group's committed
// offsets and, where the group has none, starts the log start offsets of
// the topics asked (called at most once per check).
func (g *gapTracker) check(recs []*kgo.Record, committed func() map[string]map[int32]kgo.EpochOffset, starts func(topics []string) (map[string]map[int32]int64, error)) (map[string]gap, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out map[string]gap
	var offsets map[string]map[int32]kgo.EpochOffset
	var logStarts map[string]map[int32]int64
	for i, r := range recs {
		ps := g.next[r.Topic]
		if ps == nil {
			ps = map[int32]int64{}
			g.next[r.Topic] = ps
		}
		want, ok := ps[r.Partition]
		if !ok {
			if offsets == nil {
				offsets = committed()
			}
			if o, found := offsets[r.Topic][r.Partition]; found && o.Offset >= 0 {
				want, ok = o.Offset, true
			} else {
				if logStarts == nil {
					var err error
					if logStarts, err = starts(g.uncommittedTopics(recs[i:], offsets)); err != nil {
						return nil, err
					}
				}
				want, ok = logStarts[r.Topic][r.Partition]
			}
		}
		if ok && r.Offset > want {
			if _, seen := out[r.Topic]; !seen {
				if out == nil {
					out = map[string]gap{}
				}
				out[r.Topic] = gap{partition: r.Partition, from: want, to: r.Offset, first: r}
			}
		}
		ps[r.Partition] = r.Offset + 1
	}
	return out, nil
}

// uncommittedTopics are the topics of recs with a partition neither
// tracked nor committed: those whose log start offsets check needs.
func (g *gapTracker) uncommittedTopics(recs []*kgo.Record, committed map[string]map[int32]kgo.EpochOffset) []string {
	var topics []string
	for _, r := range recs {
		if _, tracked := g.next[r.Topic][r.Partition]; tracked {
			continue
		}
		if o, found := committed[r.Topic][r.Partition]; found && o.Offset >= 0 {
			continue
		}
		if !slices.Contains(topics, r.Topic) {
			topics = append(topics, r.Topic)
		}
	}
	return topics
}

// logStartOffsets lists the log start offsets of topics with adm.
func logStartOffsets(ctx context.Context, adm *kadm.Client, topics []string) (map[string]map[int32]int64, error) {
	listed, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("log start offsets of %v: %w", topics, err)
	}
	out := map[string]map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out, nil
}
