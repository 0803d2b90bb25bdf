package resolver

import (
	"context"
	"sync"

	"github.com/decant-cdc/decant/internal/fence"
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

// A FencingSink is a Sink that writes, in a build stage session, each
// document through the transactional writer of the refs partition it was
// built from (wire.Document.Writer), kept in the session's fence.Fence
// (which Write finds in its context). OpenWriters opens the writers of
// newly assigned partitions, fencing their previous owners (see
// indexer.KafkaSink.OpenWriters). group is the build stage's group.
type FencingSink interface {
	Sink
	OpenWriters(ctx context.Context, f *fence.Fence, group string, ids []string) error
}

// Sinks fans out to several sinks (aggregate topic, Elasticsearch), all
// must succeed. Write writes to every sink concurrently and returns the
// first error; the Builder then retries the whole batch on every sink,
// which version guards make harmless.
type Sinks []Sink

// OpenWriters implements FencingSink: it opens the writers of every sink
// that fences.
func (s Sinks) OpenWriters(ctx context.Context, f *fence.Fence, group string, ids []string) error {
	for _, sink := range s {
		if fs, ok := sink.(FencingSink); ok {
			if err := fs.OpenWriters(ctx, f, group, ids); err != nil {
				return err
			}
		}
	}
	return nil
}

// fencing says whether a sink of s fences.
func (s Sinks) fencing() bool {
	for _, sink := range s {
		if _, ok := sink.(FencingSink); ok {
			return true
		}
	}
	return false
}

// Write implements Sink. In a fenced build stage session (ctx carries a
// fence.Fence) the sinks that fence are written first, the others only
// once they succeeded: a member that lost its partitions learns it from
// the aggregate topic's transaction before it writes anywhere else.
func (s Sinks) Write(ctx context.Context, docs []wire.Document) error {
	if fence.From(ctx) != nil && len(s) > 1 {
		var fenced, rest Sinks
		for _, sink := range s {
			if _, ok := sink.(FencingSink); ok {
				fenced = append(fenced, sink)
			} else {
				rest = append(rest, sink)
			}
		}
		if len(fenced) > 0 && len(rest) > 0 {
			if err := fenced.write(ctx, docs); err != nil {
				return err
			}
			return rest.write(ctx, docs)
		}
	}
	return s.write(ctx, docs)
}

// write writes every sink of s concurrently.
func (s Sinks) write(ctx context.Context, docs []wire.Document) error {
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
