package e2e

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/wire"
)

// resFirstHeld is a sink that records the length of every Write and holds
// the first one of at least least documents until released: a search
// engine busy with that group while the build stage builds the next.
type resFirstHeld struct {
	mu      sync.Mutex
	least   int
	writes  []int
	held    int // the index in writes of the held one, -1 before
	ids     map[string]bool
	release chan struct{}
}

func (s *resFirstHeld) Write(ctx context.Context, docs []wire.Document) error {
	s.mu.Lock()
	s.writes = append(s.writes, len(docs))
	hold := s.held < 0 && len(docs) >= s.least
	if hold {
		s.held = len(s.writes) - 1
	}
	for _, d := range docs {
		s.ids[string(d.ID)] = true
	}
	s.mu.Unlock()
	if hold {
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TestBuildWritesWhileGroupsFill: with no group being written, the build
// stage hands the sinks its first built chunk at once instead of waiting
// for a group of WriteBytes (or the batch's end): a backlog's first bulk
// request left 0.3 s later than it could, Elasticsearch idle meanwhile.
// The chunks built while that write is out are grouped, as before.
func TestBuildWritesWhileGroupsFill(t *testing.T) {
	const n = 3000
	e := newResEnv(t, `CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);
		INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 3000) i;`, `version: 1
aggregates:
  customer:
    table: customers
    columns: [id, name]
    elasticsearch: {index: IDX_customer}
`)
	ctx := testenv.Ctx(t)
	cfg := e.cfg
	cfg.WriteBytes = 64 << 20 // never full: only the batch's end or an idle sink sends a group
	// The build stage's first poll may find only a few refs (a batch of
	// its own, written at once): the held write is the first of a batch
	// of many chunks.
	sink := &resFirstHeld{least: e.cfg.BatchSize / 2, held: -1, ids: map[string]bool{}, release: make(chan struct{})}
	// Every ref is in the refs topic before the build stage polls, so its
	// first batch holds many chunks.
	bf, err := resolver.Backfill(ctx, cfg, e.pool, e.model, "customer", resolver.BackfillOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := resolver.NewBuilder(cfg, e.model, e.pool, sink)
	if err != nil {
		t.Fatal(err)
	}
	e.start("build", func(ctx context.Context) error { return b.Run(ctx) })
	testenv.WaitFor(t, "a write of a batch of many chunks", time.Minute, func() (bool, error) {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.held >= 0, nil
	})
	// The batch's other chunks (14 statements of 200 rows on 4
	// connections, tens of milliseconds) are built meanwhile.
	time.Sleep(2 * time.Second)
	close(sink.release)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := resolver.WaitBuilt(wctx, cfg, bf, nil); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	t.Logf("writes: %v", sink.writes)
	if len(sink.ids) != n {
		t.Errorf("%d documents written, want %d", len(sink.ids), n)
	}
	if held := sink.writes[sink.held]; held > e.cfg.BatchSize {
		t.Errorf("a write of %d documents, more than one chunk (%d), went out with no other being written: it waited for its group to fill; writes %v", held, e.cfg.BatchSize, sink.writes)
	}
	if rest := sink.writes[sink.held+1:]; len(rest) == 0 || slices.Max(rest) <= e.cfg.BatchSize {
		t.Errorf("after the held write, no write of more than one chunk: the chunks built while it was out were not grouped; writes %v", sink.writes)
	}
}
