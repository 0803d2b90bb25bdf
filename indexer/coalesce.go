package indexer

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime/trace"
	"slices"
	"sync/atomic"

	"github.com/elastic/go-elasticsearch/v8/esapi"

	"github.com/decant-cdc/decant/internal/fence"
)

// Bulk requests are coalesced. Every Write's chunk of actions is a part;
// at most MaxRequests bulk requests are in flight, and the parts that
// wait for one meanwhile go out together, in one request of up to
// BulkBytes and BulkActions. Under a trickle of small writes (the build
// stage's batches at a moderate change rate, up to 64 in flight) a part
// that finds a request free goes alone at once, and the others wait no
// longer than they would have for a free request — but then share it, so
// Elasticsearch parses, routes and fsyncs its translog once per request
// instead of once per small write.

// bulkPart is one chunk of actions waiting for a bulk request.
type bulkPart struct {
	ctx  context.Context
	body []byte
	n    int
	res  chan bulkResult // buffered: the sender never blocks
}

// bulkResult is a part's share of a bulk request's answer: when code is
// 200, its n items; otherwise the status and body, or err when there was
// no answer — unreachable (connection refused, reset, timeout: retry),
// or the part's context ended, its writer was fenced, the answer could
// not be read (fail the write).
type bulkResult struct {
	code        int
	resp        []byte
	items       []bulkItem
	err         error
	unreachable bool
}

// bulk sends body (n actions) in a bulk request, alone or with other
// writers' parts, and returns its share of the answer.
func (s *ESSink) bulk(ctx context.Context, body []byte, n int) bulkResult {
	p := &bulkPart{ctx: ctx, body: body, n: n, res: make(chan bulkResult, 1)}
	s.qmu.Lock()
	s.queue = append(s.queue, p)
	start := s.sending < s.cfg.MaxRequests
	if start {
		s.sending++
	}
	s.qmu.Unlock()
	if start {
		go s.sendQueued()
	}
	select {
	case r := <-p.res:
		return r
	case <-ctx.Done():
		return bulkResult{err: ctx.Err()}
	}
}

// sendQueued sends the queued parts, as many as fit in one request at a
// time, until none is left.
func (s *ESSink) sendQueued() {
	for {
		s.qmu.Lock()
		if len(s.queue) == 0 {
			s.sending--
			s.qmu.Unlock()
			return
		}
		i, size, n := 0, 0, 0
		for i < len(s.queue) {
			p := s.queue[i]
			if i > 0 && (size+len(p.body) > s.cfg.BulkBytes || n+p.n > s.cfg.BulkActions) {
				break
			}
			size += len(p.body)
			n += p.n
			i++
		}
		parts := slices.Clone(s.queue[:i])
		s.queue = slices.Delete(s.queue, 0, i)
		s.qmu.Unlock()
		s.sendParts(parts)
	}
}

// sendParts sends parts in one bulk request and hands each its share of
// the answer. A part whose context ended or whose writer lost its
// partitions is left out: a build member that may have lost them must
// not write (its successor may have deleted a document since, and
// Elasticsearch forgets deletes after index.gc_deletes; internal/fence),
// checked here, as close to the request as can be.
func (s *ESSink) sendParts(parts []*bulkPart) {
	live := parts[:0]
	for _, p := range parts {
		err := p.ctx.Err()
		if err == nil {
			err = fence.Check(p.ctx)
		}
		if err != nil {
			p.res <- bulkResult{err: err}
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	s.met.requests.WithLabelValues(s.kind).Inc()
	s.met.parts.WithLabelValues(s.kind).Add(float64(len(live)))
	s.stats.requests.Add(1)
	s.stats.parts.Add(int64(len(live)))
	// The request lasts while any of its parts' writers still waits.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waiting atomic.Int64
	waiting.Store(int64(len(live)))
	for _, p := range live {
		stop := context.AfterFunc(p.ctx, func() {
			if waiting.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	body := live[0].body
	if len(live) > 1 {
		var b bytes.Buffer
		for _, p := range live {
			b.Write(p.body)
		}
		body = b.Bytes()
	}
	// Only what classify reads comes back: the response was a quarter of
	// the sink's CPU.
	// A region in execution traces (/debug/pprof/trace): docs/performance.md.
	region := trace.StartRegion(ctx, "search bulk request")
	code, resp, err := do(ctx, s.es, esapi.BulkRequest{Body: bytes.NewReader(body), FilterPath: bulkFilter})
	region.End()
	switch {
	case err != nil:
		for _, p := range live {
			p.res <- bulkResult{err: err, unreachable: true}
		}
	case code == http.StatusRequestEntityTooLarge && len(live) > 1:
		for _, p := range live { // each alone: the writer splits its own
			s.sendParts([]*bulkPart{p})
		}
	case code != http.StatusOK:
		for _, p := range live {
			p.res <- bulkResult{code: code, resp: resp}
		}
	default:
		total := 0
		for _, p := range live {
			total += p.n
		}
		items, err := parseBulkResponse(resp, total)
		if err != nil {
			err = fmt.Errorf("elasticsearch: %w", err)
		}
		for _, p := range live {
			if err != nil {
				p.res <- bulkResult{err: err}
				continue
			}
			p.res <- bulkResult{code: code, items: items[:p.n:p.n]}
			items = items[p.n:]
		}
	}
}
