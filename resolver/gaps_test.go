package resolver

import (
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func gapRecs(topic string, partition int32, offsets ...int64) []*kgo.Record {
	recs := make([]*kgo.Record, len(offsets))
	for i, o := range offsets {
		recs[i] = &kgo.Record{Topic: topic, Partition: partition, Offset: o}
	}
	return recs
}

// TestGapTrackerFindsHoles: a hole is found against the group's commit,
// between two records, and, for a partition the group has no commit for,
// against the log start offset (records compacted away before the first
// one left); the log start offsets are listed once per check and only for
// topics with such a partition.
func TestGapTrackerFindsHoles(t *testing.T) {
	committed := func() map[string]map[int32]kgo.EpochOffset {
		return map[string]map[int32]kgo.EpochOffset{"raw.a": {0: {Offset: 10}}}
	}
	var listed [][]string
	starts := func(topics []string) (map[string]map[int32]int64, error) {
		listed = append(listed, slices.Clone(topics))
		return map[string]map[int32]int64{"raw.b": {0: 0, 1: 5}}, nil
	}
	g := newGapTracker()

	// raw.a/0 resumes at its commit; raw.b/0 (no commit) starts at its log
	// start offset 0 but its first record left is 7; raw.b/1 starts at 5.
	recs := append(append(gapRecs("raw.a", 0, 10, 11), gapRecs("raw.b", 0, 7, 8)...), gapRecs("raw.b", 1, 5)...)
	holes, err := g.check(recs, committed, starts)
	if err != nil {
		t.Fatal(err)
	}
	if len(holes) != 1 {
		t.Fatalf("holes = %v, want one in raw.b", holes)
	}
	if h := holes["raw.b"]; h.partition != 0 || h.from != 0 || h.to != 7 {
		t.Errorf("raw.b hole = partition %d [%d, %d), want partition 0 [0, 7)", h.partition, h.from, h.to)
	}
	if len(listed) != 1 || !slices.Equal(listed[0], []string{"raw.b"}) {
		t.Errorf("log start offsets listed for %v, want once for [raw.b]", listed)
	}

	// Tracked partitions need neither the commit nor the log start: a hole
	// between two polls is found against the previous record.
	holes, err = g.check(append(gapRecs("raw.a", 0, 13), gapRecs("raw.b", 0, 9)...), committed, starts)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := holes["raw.a"]; !ok || h.from != 12 || h.to != 13 || len(holes) != 1 {
		t.Errorf("holes = %v, want raw.a [12, 13) only", holes)
	}
	if len(listed) != 1 {
		t.Errorf("log start offsets listed again for tracked partitions: %v", listed)
	}

	// A failed listing fails the batch (it is consumed again).
	boom := errors.New("boom")
	if _, err := newGapTracker().check(gapRecs("raw.b", 0, 0), committed, func([]string) (map[string]map[int32]int64, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("check with a failed listing = %v, want %v", err, boom)
	}
}
