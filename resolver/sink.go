package resolver

import (
	"context"
	"sync"

	"github.com/decant-cdc/decant/wire"
)

// Sink receives built documents. Write blocks until every document is
// durably accepted by the sink (or dead-lettered by it) and returns an
// error only when the batch must be retried (the caller then does not
// commit its offsets). Writes must be idempotent and version-guarded: the
// same or an older document may be written again after a crash. Safe for
// concurrent use.
type Sink interface {
	Write(ctx context.Context, docs []wire.Document) error
}

// Sinks fans out to several sinks (aggregate topic, Elasticsearch), all
// must succeed. Write writes to every sink concurrently and returns the
// first error; the Builder then retries the whole batch on every sink,
// which version guards make harmless.
type Sinks []Sink

// Write implements Sink.
func (s Sinks) Write(ctx context.Context, docs []wire.Document) error {
	switch len(s) {
	case 0:
		return nil
	case 1:
		return s[0].Write(ctx, docs)
	}
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, sink := range s {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sink.Write(ctx, docs); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}
