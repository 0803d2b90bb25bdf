package resolver

import (
	"cmp"
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
// Otherwise every sink is written at once.
func (s Sinks) Write(ctx context.Context, docs []wire.Document) error {
	return s.writeInPhases(ctx, docs, nil, nil)
}

// writeInPhases writes docs as Write does, and moreover calls logged (when
// not nil) once the log sinks accepted them, and writes the other sinks
// only once gate (when not nil) returned nil. The log sinks are those that
// fence: the aggregate topics, whose readers keep a key's last record, so
// that two writes of a document must reach them in the order of their
// builds. The others (Elasticsearch) keep a document's highest version
// whatever the order, but two builds may carry the same version, and gate
// lets the caller keep their order too.
func (s Sinks) writeInPhases(ctx context.Context, docs []wire.Document, logged func(), gate func() error) error {
	var logs, rest Sinks
	for _, sink := range s {
		if _, ok := sink.(FencingSink); ok {
			logs = append(logs, sink)
		} else {
			rest = append(rest, sink)
		}
	}
	writeLogs := func() error {
		if err := logs.write(ctx, docs); err != nil {
			return err
		}
		if logged != nil {
			logged()
		}
		return nil
	}
	writeRest := func() error {
		if len(rest) == 0 {
			return nil
		}
		if gate != nil {
			if err := gate(); err != nil {
				return err
			}
		}
		return rest.write(ctx, docs)
	}
	if fence.From(ctx) != nil {
		if err := writeLogs(); err != nil {
			return err
		}
		return writeRest()
	}
	var restErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		restErr = writeRest()
	}()
	err := writeLogs()
	<-done
	return cmp.Or(err, restErr)
}

// writeInPhases writes docs to s as Sinks.writeInPhases does, s being
// one sink or several (Sinks).
func writeInPhases(ctx context.Context, s Sink, docs []wire.Document, logged func(), gate func() error) error {
	ss, ok := s.(Sinks)
	if !ok {
		ss = Sinks{s}
	}
	return ss.writeInPhases(ctx, docs, logged, gate)
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
