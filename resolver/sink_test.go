package resolver

import (
	"context"
	"sync"

	"github.com/decant-cdc/decant/wire"
)

// recordSink records every document written to it.
type recordSink struct {
	mu   sync.Mutex
	docs []wire.Document
}

func (s *recordSink) Write(_ context.Context, docs []wire.Document) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs = append(s.docs, docs...)
	return nil
}

type sinkFunc func([]wire.Document) error

func (f sinkFunc) Write(_ context.Context, docs []wire.Document) error { return f(docs) }
