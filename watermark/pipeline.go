package watermark

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/wire"
)

// Positions is one reading of everything the pipeline page draws, from
// the same sources as Status (the slot in PostgreSQL, end offsets and
// committed group offsets in Kafka), so it describes the whole pipeline
// whichever process runs which stage.
type Positions struct {
	At       time.Time  `json:"at"`
	Slot     SlotStatus `json:"slot"`
	WALLSN   string     `json:"wal_lsn"`
	Warnings []string   `json:"warnings"`
	// Raw are the mapped raw topics, Committed by the map group.
	Raw []TopicPosition `json:"raw"`
	// Refs are the refs topics, Committed by the build group.
	Refs []TopicPosition `json:"refs"`
	// Agg are the aggregate topics (no group: Committed is 0), with the
	// time of their newest record when Newest was asked.
	Agg []TopicPosition `json:"agg"`
	// DLQ is how many records the dead-letter topic ever received.
	DLQ int64 `json:"dlq"`
}

// TopicPosition is one topic summed over its partitions.
type TopicPosition struct {
	Topic     string    `json:"topic"`
	Aggregate string    `json:"aggregate,omitempty"` // refs and aggregate topics
	End       int64     `json:"end"`                 // records ever written (sum of end offsets)
	Committed int64     `json:"committed"`           // the consuming group's committed offsets
	Newest    time.Time `json:"newest,omitzero"`     // timestamp of the newest record, when read
	// Oldest is the timestamp of the oldest record the group has not
	// committed (raw and refs topics, when read): how far behind in time
	// its stage is. Zero when it is caught up.
	Oldest time.Time `json:"oldest,omitzero"`
}

// Lag is the records written and not yet committed by the topic's group.
func (p TopicPosition) Lag() int64 { return max(0, p.End-p.Committed) }

// Positions reads the slot, every topic's end offsets and both groups'
// committed offsets: one query and four Kafka requests (five with
// newest, which also reads the aggregate topics' newest timestamps). It
// fails only when the slot or the end offsets cannot be read.
func (t *Tracker) Positions(ctx context.Context, newest bool) (*Positions, error) {
	p := &Positions{At: time.Now()}
	maxKeep, err := t.slotStatus(ctx, &p.Slot)
	if err != nil {
		return nil, err
	}
	p.Warnings = slotWarnings(p.Slot, maxKeep)
	var wal string
	if err := t.db.QueryRow(ctx, `SELECT `+walLSN+`::text`).Scan(&wal); err != nil {
		return nil, fmt.Errorf("read the WAL position: %w", err)
	}
	p.WALLSN = wal
	refs, aggs := t.refsTopics(), make([]string, len(t.cfg.Aggregates))
	for i, a := range t.cfg.Aggregates {
		aggs[i] = wire.AggTopic(t.cfg.TopicPrefix, a)
	}
	dlq := wire.DLQTopic(t.cfg.TopicPrefix)
	all := append(append(append(append([]string{}, t.cfg.RawTopics...), refs...), aggs...), dlq)
	ends, err := t.ends(ctx, all)
	if err != nil {
		return nil, err
	}
	sums := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			sums[o.Topic] += o.Offset
		}
	})
	p.DLQ = sums[dlq]
	pending := map[string]map[int32]kgo.Offset{} // partitions behind: their first record not committed
	committed := func(group string, topics []string) map[string]int64 {
		out := map[string]int64{}
		offs, err := t.admin.FetchOffsetsForTopics(ctx, group, topics...)
		if err != nil {
			p.Warnings = append(p.Warnings, fmt.Sprintf("cannot read the committed offsets of group %s: %v", group, err))
			return out
		}
		offs.Each(func(o kadm.OffsetResponse) {
			at := max(o.At, 0)
			if o.Err == nil {
				out[o.Topic] += at
			}
			if end, ok := ends.Lookup(o.Topic, o.Partition); ok && end.Err == nil && end.Offset > at {
				if pending[o.Topic] == nil {
					pending[o.Topic] = map[int32]kgo.Offset{}
				}
				pending[o.Topic][o.Partition] = kgo.NewOffset().At(at)
			}
		})
		return out
	}
	mapped, built := committed(t.cfg.Group+".map", t.cfg.RawTopics), committed(t.cfg.Group+".build", refs)
	for _, topic := range t.cfg.RawTopics {
		p.Raw = append(p.Raw, TopicPosition{Topic: topic, End: sums[topic], Committed: mapped[topic]})
	}
	for i, a := range t.cfg.Aggregates {
		p.Refs = append(p.Refs, TopicPosition{Topic: refs[i], Aggregate: a, End: sums[refs[i]], Committed: built[refs[i]]})
		p.Agg = append(p.Agg, TopicPosition{Topic: aggs[i], Aggregate: a, End: sums[aggs[i]]})
	}
	if newest {
		oldest := t.oldestPending(ctx, pending)
		for i := range p.Raw {
			p.Raw[i].Oldest = oldest[p.Raw[i].Topic]
		}
		for i := range p.Refs {
			p.Refs[i].Oldest = oldest[p.Refs[i].Topic]
		}
		if ts, err := t.admin.ListMaxTimestampOffsets(ctx, aggs...); err == nil {
			last := map[string]time.Time{}
			ts.Each(func(o kadm.ListedOffset) {
				if o.Err == nil && o.Timestamp > 0 {
					if at := time.UnixMilli(o.Timestamp); at.After(last[o.Topic]) {
						last[o.Topic] = at
					}
				}
			})
			for i := range p.Agg {
				p.Agg[i].Newest = last[p.Agg[i].Topic]
			}
		}
	}
	return p, nil
}

// oldestPending reads the first uncommitted record of each partition that
// is behind and returns, per topic, the oldest of their timestamps. A
// partition whose record does not come within 2 s is left out.
func (t *Tracker) oldestPending(ctx context.Context, pending map[string]map[int32]kgo.Offset) map[string]time.Time {
	out := map[string]time.Time{}
	if len(pending) == 0 {
		return out
	}
	want := 0
	for _, ps := range pending {
		want += len(ps)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, t.kopts...), kgo.ConsumePartitions(pending), kgo.FetchMaxBytes(1<<20))...)
	if err != nil {
		return out
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	seen := map[string]map[int32]bool{}
	for got := 0; got < want && ctx.Err() == nil; {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			if seen[r.Topic] == nil {
				seen[r.Topic] = map[int32]bool{}
			}
			if seen[r.Topic][r.Partition] {
				return
			}
			seen[r.Topic][r.Partition] = true
			got++
			if o, ok := out[r.Topic]; !ok || r.Timestamp.Before(o) {
				out[r.Topic] = r.Timestamp
			}
		})
	}
	return out
}

// DeadLetterRecord is one record of the dead-letter topic.
type DeadLetterRecord struct {
	At time.Time
	wire.DeadLetter
}

// Concerns names the aggregates whose documents the dead letter
// concerns: the index stage's aggregate, the map stage's aggregates, or
// the aggregate of the refs topic (one of refs) holding an unreadable
// ref; none for the stream stage.
func (d DeadLetterRecord) Concerns(refs []TopicPosition) []string {
	switch {
	case d.Aggregate != "":
		return []string{d.Aggregate}
	case len(d.DeadLetter.Aggregates) > 0:
		return d.DeadLetter.Aggregates
	}
	for _, r := range refs {
		if d.Topic != "" && d.Topic == r.Topic {
			return []string{r.Aggregate}
		}
	}
	return nil
}

// DeadLetterReader reads the dead-letter topic from its start, without a
// consumer group. Not safe for concurrent use; Close it.
type DeadLetterReader struct{ cl *kgo.Client }

// NewDeadLetterReader opens a reader of the dead-letter topic (it need
// not exist yet). It does no I/O.
func (t *Tracker) NewDeadLetterReader() (*DeadLetterReader, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, t.kopts...),
		kgo.ConsumeTopics(wire.DLQTopic(t.cfg.TopicPrefix)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return nil, err
	}
	return &DeadLetterReader{cl: cl}, nil
}

// Read returns the next dead letters, at most max, waiting at most wait
// for the first; none when there is none (or ctx ends).
func (r *DeadLetterReader) Read(ctx context.Context, max int, wait time.Duration) []DeadLetterRecord {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var out []DeadLetterRecord
	r.cl.PollRecords(ctx, max).EachRecord(func(rec *kgo.Record) {
		d := DeadLetterRecord{At: rec.Timestamp}
		if json.Unmarshal(rec.Value, &d.DeadLetter) != nil {
			d.Reason = fmt.Sprintf("undecodable dead letter at %s/%d/%d", rec.Topic, rec.Partition, rec.Offset)
		}
		out = append(out, d)
	})
	return out
}

// Close closes the reader's Kafka client.
func (r *DeadLetterReader) Close() { r.cl.Close() }
