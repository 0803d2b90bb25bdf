package indexer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/trace"
	"sync"

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
	cl, err := newProducer(append(append([]kgo.Opt(nil), s.cfg.Kafka...), kgo.TransactionalID(txnID)), s.cfg.MaxBufferedRecords)
	if err != nil {
		return err
	}
	// Loading the producer id is what fences the previous owner.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return fmt.Errorf("open the transactional writer %s: %w", txnID, err)
	}
	f.SetWriter(id, &txnWriter{id: txnID, cl: cl})
	return nil
}

// txnWriter writes one refs partition's documents in Kafka transactions,
// one at a time.
type txnWriter struct {
	id string
	mu sync.Mutex
	cl *kgo.Client
}

// Close releases the client (an open transaction is aborted by Kafka).
func (w *txnWriter) Close() error {
	w.cl.Close()
	return nil
}

// write produces recs in one transaction and commits it. Records Kafka
// can never take (too large) abort the transaction; the others are then
// written in a second one, and the results say which failed. Any other
// failure (fenced by a newer owner, Kafka unavailable) loses f: the
// session must end.
func (w *txnWriter) write(ctx context.Context, f *fence.Fence, recs []*kgo.Record) (kgo.ProduceResults, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
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
		case isTooLarge(r.Err):
		default:
			err := fmt.Errorf("transaction of %s: %w", w.id, r.Err)
			f.Lose(err)
			return nil, err
		}
		if r.Err == nil {
			rest = append(rest, recs[j])
			at = append(at, j)
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
	results := w.cl.ProduceSync(ctx, recs...)
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
