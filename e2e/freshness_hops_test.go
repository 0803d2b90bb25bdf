package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// freshHops splits the aggregate topic's latency of the sampled changes
// into the pipeline's hops, from the timestamps of the records each change
// left on the way (set by the producing client when it was handed the
// record):
//
//   - stream: commit → the raw record (the streamer decoded it and handed
//     it to its producer);
//   - map: the raw record → the refs record of its document (the map
//     stage fetched the raw record, looked its aggregate up, produced);
//   - build: the refs record → the aggregate record (the refs
//     transaction's commit, the build stage's fetch, statement and hand-off);
//   - visible: the aggregate record → read by a read-committed consumer
//     (the build stage's transaction commit and the consumer's fetch).
//
// It reads the records after the window, from offsets taken before it, so
// it costs the measured pipeline nothing.
type freshHops struct {
	k     *testenv.KafkaEnv
	raw   [2]string // customers, orders
	refs  string
	from  map[string]map[int32]int64 // topic → partition → end offset when the window began
	names [4]string
}

func newFreshHops(ctx context.Context, tb testing.TB, k *testenv.KafkaEnv) *freshHops {
	h := &freshHops{k: k, raw: [2]string{wire.RawTopic(k.Prefix, "public", "customers"), wire.RawTopic(k.Prefix, "public", "orders")},
		refs: wire.RefsTopic(k.Prefix, "customer"), from: map[string]map[int32]int64{},
		names: [4]string{"stream", "map", "build", "visible"}}
	for _, t := range []string{h.raw[0], h.raw[1], h.refs} {
		ends, err := testenv.TopicEnds(ctx, k.Admin, t)
		if err != nil {
			tb.Fatal(err)
		}
		h.from[t] = ends
	}
	return h
}

// read returns, from the records written since newFreshHops, the raw
// record's timestamp of each change (by its seq) and the refs records'
// timestamps of each document, in offset order. It reads until the
// topics' end offsets of now.
func (h *freshHops) read(ctx context.Context, tb testing.TB) (raw map[int64]time.Time, refs map[int][]time.Time) {
	raw, refs = map[int64]time.Time{}, map[int][]time.Time{}
	for _, t := range []string{h.raw[0], h.raw[1], h.refs} {
		recs, err := testenv.ReadTopicFrom(ctx, h.k.Admin, h.k.Brokers, t, h.from[t])
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range recs {
			if t == h.refs {
				var key struct{ ID int }
				if json.Unmarshal(r.Key, &key) == nil {
					refs[key.ID] = append(refs[key.ID], r.Timestamp)
				}
				continue
			}
			var v struct {
				After *struct {
					Seq int64 `json:"seq"`
				} `json:"after"`
			}
			if json.Unmarshal(r.Value, &v) == nil && v.After != nil {
				if _, dup := raw[v.After.Seq]; !dup { // a redelivery keeps the first
					raw[v.After.Seq] = r.Timestamp
				}
			}
		}
	}
	return raw, refs
}

// split returns each sample's hops (see freshHops), for the samples whose
// records were all found.
func (h *freshHops) split(samples []freshSample, raw map[int64]time.Time, refs map[int][]time.Time) [][4]time.Duration {
	var out [][4]time.Duration
	for _, sm := range samples {
		rt, ok := raw[sm.seq]
		if !ok {
			continue
		}
		// The document's first refs record after its raw record: changes to
		// one document are n changes apart, seconds, so none other is near.
		ts := refs[sm.doc]
		i := slices.IndexFunc(ts, func(t time.Time) bool { return !t.Before(rt) })
		if i < 0 {
			continue
		}
		committed := sm.committed
		produced := committed.Add(sm.produced)
		read := committed.Add(sm.latency)
		out = append(out, [4]time.Duration{rt.Sub(committed), ts[i].Sub(rt), produced.Sub(ts[i]), read.Sub(produced)})
	}
	return out
}

// report is the hops' part of the BENCH freshness line: each hop's p50 and
// p99 over the samples, and the mean of each hop over the samples at or
// above the p99 of the whole latency (where the tail is spent).
func (h *freshHops) report(hops [][4]time.Duration) string {
	if len(hops) == 0 {
		return "agg_hops=none"
	}
	var p50, p99, tail [4]string
	totals := make([]time.Duration, len(hops))
	for i, hp := range hops {
		for _, d := range hp {
			totals[i] += d
		}
	}
	cut := freshPercentile(totals, 0.99)
	var tailSum [4]time.Duration
	tailN := 0
	for i, hp := range hops {
		if totals[i] >= cut {
			tailN++
			for j, d := range hp {
				tailSum[j] += d
			}
		}
	}
	for j := range h.names {
		col := make([]time.Duration, len(hops))
		for i, hp := range hops {
			col[i] = hp[j]
		}
		p50[j] = fmt.Sprint(freshPercentile(col, 0.5).Milliseconds())
		p99[j] = fmt.Sprint(freshPercentile(col, 0.99).Milliseconds())
		tail[j] = fmt.Sprint((tailSum[j] / time.Duration(tailN)).Milliseconds())
	}
	names := strings.Join(h.names[:], "/")
	return fmt.Sprintf("agg_hops=%s agg_hops_samples=%d agg_hops_p50=%sms agg_hops_p99=%sms agg_hops_tail_mean=%sms (%d samples at or above %dms)",
		names, len(hops), strings.Join(p50[:], "/"), strings.Join(p99[:], "/"), strings.Join(tail[:], "/"), tailN, cut.Milliseconds())
}
