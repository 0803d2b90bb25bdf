package indexer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/fence"
	"github.com/decant-cdc/decant/wire"
)

// OpenWriters opens, for the build stage session that f fences, the
// transactional writer of each refs partition in ids (fence.WriterID), and
// keeps them in f. A writer's transactional id is <group>/<id>: opening it
// makes Kafka bump the id's epoch, which aborts the transaction the
// partition's previous owner may have open and fails every later write of
// that owner. Call it when the partitions are assigned, before any of
// their refs is built.
func (s *KafkaSink) OpenWriters(ctx context.Context, f *fence.Fence, group string, ids []string) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.openWriter(ctx, f, group+"/"+id, id)
			if err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func (s *KafkaSink) openWriter(ctx context.Context, f *fence.Fence, txnID, id string) error {
	opts := append(append([]kgo.Opt(nil), s.cfg.Kafka...), kgo.TransactionalID(txnID), kgo.MetadataMinAge(txnMetadataMinAge))
	cl, err := newProducer(opts, s.cfg.MaxBufferedRecords)
	if err != nil {
		return err
	}
	// Loading the producer id is what fences the previous owner.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return fmt.Errorf("open the transactional writer %s: %w", txnID, err)
	}
	f.SetWriter(id, &txnWriter{id: txnID, cl: cl, sink: s, max: s.cfg.MaxBufferedRecords})
	return nil
}

// txnMetadataMinAge is how soon after a metadata refresh a writer may
// refresh again. franz-go retries a produce that failed with a retriable
// error after the metadata refresh the error triggers, and refreshes at
// most once per MetadataMinAge (5 s by default). Kafka 4's transactions
// (KIP-890) answer a produce that follows a commit before the commit's
// markers reached the partition with CONCURRENT_TRANSACTIONS: under load
// the next transaction's records then waited 5 s, and with them every
// batch of that refs partition (the 4.9 s stalls of the aggregate topic's
// p99 in make bench-freshness).
const txnMetadataMinAge = 100 * time.Millisecond

// txnWriter writes one refs partition's documents in Kafka transactions,
// one at a time. Writes that arrive while a transaction is under way wait
// for it and then share the next one (group commit): under a stream of
// small batches a refs partition pays a transaction's round trips (add
// partitions, produce, end and its markers) once per group of waiting
// writes rather than once per write, and a slow transaction delays the
// writes behind it by one transaction, not by one each.
type txnWriter struct {
	id   string
	cl   *kgo.Client
	sink *KafkaSink
	max  int // records per transaction, at most (unless one write holds more)

	mu      sync.Mutex // guards queue and writing
	queue   []*txnPart
	writing bool
}

// txnPart is one write waiting for a transaction.
type txnPart struct {
	ctx  context.Context
	recs []*kgo.Record
	done chan txnResult // buffered: the committer never blocks
}

type txnResult struct {
	results kgo.ProduceResults
	err     error
}

// Close releases the client (an open transaction is aborted by Kafka).
func (w *txnWriter) Close() error {
	w.cl.Close()
	return nil
}

// write produces recs in a transaction, alone or with other writes that
// waited meanwhile, and returns their results once it committed. Records
// Kafka can never take (too large) abort the transaction; the others are
// then written in a second one, and the results say which failed. Any
// other failure (fenced by a newer owner, Kafka unavailable) loses f: the
// session must end.
func (w *txnWriter) write(ctx context.Context, f *fence.Fence, recs []*kgo.Record) (kgo.ProduceResults, error) {
	p := &txnPart{ctx: ctx, recs: recs, done: make(chan txnResult, 1)}
	w.mu.Lock()
	w.queue = append(w.queue, p)
	start := !w.writing
	w.writing = true
	w.mu.Unlock()
	if start {
		go w.commitQueued(f)
	}
	r := <-p.done
	return r.results, r.err
}

// commitQueued commits the queued writes, as many as fit in a transaction
// at a time, until none is left.
func (w *txnWriter) commitQueued(f *fence.Fence) {
	for {
		w.mu.Lock()
		n, size := 0, 0
		for n < len(w.queue) && (n == 0 || size+len(w.queue[n].recs) <= w.max) {
			size += len(w.queue[n].recs)
			n++
		}
		parts := w.queue[:n:n]
		w.queue = w.queue[n:]
		if n == 0 {
			w.writing = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		w.commit(f, parts)
	}
}

// commit writes parts in one transaction and answers each. A part whose
// context ended is answered with its error and left out; the transaction
// itself runs until every remaining part's context has ended.
func (w *txnWriter) commit(f *fence.Fence, parts []*txnPart) {
	live := parts[:0:0]
	for _, p := range parts {
		if err := p.ctx.Err(); err != nil {
			p.done <- txnResult{err: err}
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	ctx, release := anyLive(live)
	defer release()
	var recs []*kgo.Record
	for _, p := range live {
		recs = append(recs, p.recs...)
	}
	results, err := w.commitAll(ctx, f, recs)
	if err == nil {
		w.sink.stats.requests.Add(1)
		w.sink.stats.parts.Add(int64(len(live)))
		w.sink.met.requests.WithLabelValues(sinkKafka).Inc()
		w.sink.met.parts.WithLabelValues(sinkKafka).Add(float64(len(live)))
	}
	at := 0
	for _, p := range live {
		if err != nil {
			p.done <- txnResult{err: err}
			continue
		}
		p.done <- txnResult{results: results[at : at+len(p.recs) : at+len(p.recs)]}
		at += len(p.recs)
	}
}

// anyLive returns a context that ends once every part's context has ended
// (the transaction serves them all), carrying the first part's values,
// and the function that releases it.
func anyLive(parts []*txnPart) (context.Context, func()) {
	if len(parts) == 1 {
		return parts[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(parts[0].ctx))
	var left atomic.Int32
	left.Store(int32(len(parts)))
	stops := make([]func() bool, len(parts))
	for i, p := range parts {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// commitAll produces recs in one transaction; when only too-large records
// failed, the others are written again in a second one.
func (w *txnWriter) commitAll(ctx context.Context, f *fence.Fence, recs []*kgo.Record) (kgo.ProduceResults, error) {
	results, err := w.transact(ctx, recs)
	if err != nil {
		f.Lose(err)
		return nil, err
	}
	var rest []*kgo.Record
	var at []int
	for j, r := range results {
		switch {
		case r.Err == nil:
			rest = append(rest, recs[j])
			at = append(at, j)
		case !isTooLarge(r.Err):
			err := fmt.Errorf("transaction of %s: %w", w.id, r.Err)
			f.Lose(err)
			return nil, err
		}
	}
	if len(rest) == len(recs) || len(rest) == 0 {
		return results, nil
	}
	// The too-large records aborted the transaction with the others in it.
	again, err := w.transact(ctx, rest)
	if err == nil {
		err = again.FirstErr()
	}
	if err != nil {
		err = fmt.Errorf("transaction of %s: %w", w.id, err)
		f.Lose(err)
		return nil, err
	}
	for i, j := range at {
		results[j] = again[i]
	}
	return results, nil
}

// transact runs one transaction: it commits when every record was
// produced, else aborts and returns the records' results (an error is
// about the transaction itself).
func (w *txnWriter) transact(ctx context.Context, recs []*kgo.Record) (kgo.ProduceResults, error) {
	if err := w.cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("begin a transaction of %s: %w", w.id, err)
	}
	defer trace.StartRegion(ctx, "aggregate topic transaction").End()
	results := produceSync(ctx, w.cl, recs)
	commit := kgo.TransactionEndTry(results.FirstErr() == nil)
	if err := w.cl.EndTransaction(ctx, commit); err != nil {
		if commit {
			_ = w.cl.EndTransaction(ctx, kgo.TryAbort) // the documented recovery; the session ends anyway
		}
		return nil, fmt.Errorf("end a transaction of %s: %w", w.id, err)
	}
	return results, nil
}

func isTooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.InvalidRecord)
}

// produceFenced produces recs, each through the writer of its document's
// refs partition (docs[owner[j]].Writer), the writers concurrently.
func produceFenced(ctx context.Context, f *fence.Fence, docs []wire.Document, recs []*kgo.Record, owner []int) (kgo.ProduceResults, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	byWriter := map[string][]int{}
	var order []string
	for j := range recs {
		id := docs[owner[j]].Writer
		if _, ok := byWriter[id]; !ok {
			order = append(order, id)
		}
		byWriter[id] = append(byWriter[id], j)
	}
	results := make(kgo.ProduceResults, len(recs))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, id := range order {
		w, _ := f.Writer(id).(*txnWriter)
		if w == nil {
			return nil, fmt.Errorf("%w: no writer for refs partition %q in this session", fence.ErrLost, id)
		}
		wg.Add(1)
		go func(js []int) {
			defer wg.Done()
			sub := make([]*kgo.Record, len(js))
			for i, j := range js {
				sub[i] = recs[j]
			}
			rs, err := w.write(ctx, f, sub)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				first = cmp.Or(first, err)
				return
			}
			for i, j := range js {
				results[j] = rs[i]
			}
		}(byWriter[id])
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return results, nil
}
