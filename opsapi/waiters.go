package opsapi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/watermark"
)

// waiters lets any number of /v1/wait callers share one watermark poll:
// one goroutine, running while someone waits, asks the tracker for the
// position every stage has passed (Tracker.Reached, which polls
// PostgreSQL and Kafka every Poll) and releases every waiter that
// position reaches. A thousand waiters cost what one does.
type waiters struct {
	t  *watermark.Tracker
	mu sync.Mutex
	w  map[*waiter]struct{}
	// passed is the highest position known to have passed every stage.
	passed atomic.Uint64
	cancel context.CancelFunc // ends the poll; nil when none runs
}

type waiter struct {
	lsn  uint64
	done chan struct{}
}

func newWaiters(t *watermark.Tracker) *waiters {
	return &waiters{t: t, w: map[*waiter]struct{}{}}
}

// wait blocks until every change committed at or before lsn has passed
// every stage, or ctx ends.
func (h *waiters) wait(ctx context.Context, lsn uint64) error {
	if lsn <= h.passed.Load() {
		return nil
	}
	w := &waiter{lsn: lsn, done: make(chan struct{})}
	h.mu.Lock()
	h.w[w] = struct{}{}
	if h.cancel == nil {
		pctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		go h.poll(pctx)
	}
	h.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		h.mu.Lock()
		delete(h.w, w)
		if len(h.w) == 0 && h.cancel != nil {
			h.cancel()
			h.cancel = nil
		}
		h.mu.Unlock()
		return ctx.Err()
	}
}

// poll runs rounds of Tracker.Reached until no one waits. A round starts
// once the streamer has confirmed the smallest waited-for position, so
// every round releases someone.
func (h *waiters) poll(ctx context.Context) {
	for {
		h.mu.Lock()
		// Only the current poll (whose context no one cancelled) may
		// touch the waiters.
		if ctx.Err() != nil {
			h.mu.Unlock()
			return
		}
		least := uint64(0)
		for w := range h.w {
			if least == 0 || w.lsn < least {
				least = w.lsn
			}
		}
		if least == 0 {
			h.cancel()
			h.cancel = nil
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		pos, err := h.t.Reached(ctx, func(confirmed uint64) bool { return confirmed >= least })
		if err != nil {
			if !ctxtime.Sleep(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		for {
			old := h.passed.Load()
			if pos <= old || h.passed.CompareAndSwap(old, pos) {
				break
			}
		}
		h.mu.Lock()
		if ctx.Err() == nil {
			for w := range h.w {
				if w.lsn <= pos {
					close(w.done)
					delete(h.w, w)
				}
			}
		}
		h.mu.Unlock()
	}
}

// refresher makes searches see what was written, for waiters: concurrent
// callers share refreshes, and two start at least interval apart, so busy
// callers cannot cause a refresh storm. A caller is answered by the first
// refresh that starts after it called.
type refresher struct {
	refresh  func(context.Context) error
	interval time.Duration
	count    atomic.Int64 // refreshes made

	mu      sync.Mutex
	next    *refreshRound // the round new callers join; nil: none planned
	lastRun time.Time     // when the last round started
}

type refreshRound struct {
	done chan struct{}
	err  error
}

// do returns once a refresh that started after the call has finished.
func (r *refresher) do(ctx context.Context) error {
	r.mu.Lock()
	round := r.next
	if round == nil {
		round = &refreshRound{done: make(chan struct{})}
		r.next = round
		wait := time.Until(r.lastRun.Add(r.interval))
		go r.run(round, wait)
	}
	r.mu.Unlock()
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run starts the round after wait: from then on, new callers plan the
// next round.
func (r *refresher) run(round *refreshRound, wait time.Duration) {
	if wait > 0 {
		time.Sleep(wait)
	}
	r.mu.Lock()
	r.next = nil
	r.lastRun = time.Now()
	r.mu.Unlock()
	r.count.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	round.err = r.refresh(ctx)
	cancel()
	close(round.done)
}
