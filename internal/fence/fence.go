// Package fence keeps a build stage member from writing documents once it
// may no longer own the refs partitions they were built from: a member
// paused by the operating system or evicted from its consumer group during
// a long retry (a zombie) must not write an older version after its
// successor wrote a newer one.
//
// A Fence lives for one consumer group session of the build stage. It
// holds two things:
//
//   - the transactional writers of the aggregate topics, one per refs
//     partition the member owns, opened when the partition is assigned
//     (Kafka bumps the transactional id's epoch, which aborts the previous
//     owner's open transaction and fails its later writes: the exact fence
//     for the aggregate topics);
//   - a lease for the writes no Kafka transaction covers (Elasticsearch):
//     the member may write while its last successful group heartbeat was
//     sent less than the lease ago and its group session has not failed.
//     A member's partitions cannot be given to another before its session
//     timeout has passed since that heartbeat reached the coordinator.
//
// Sinks find the Fence of a write in its context (From, Check).
package fence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// ErrLost is wrapped by Check's error once the member may no longer own
// its partitions.
var ErrLost = errors.New("this build member may no longer own its partitions (fenced)")

// Fence is one group session's fence. Create it with New; it is safe for
// concurrent use.
type Fence struct {
	lease time.Duration
	now   func() time.Time

	mu      sync.Mutex
	lost    error
	renewed time.Time // when the last heartbeat that succeeded was sent
	writers map[string]io.Closer
}

// New returns a Fence whose lease lasts lease after each Renew. The lease
// starts now: a group client has just joined.
func New(lease time.Duration) *Fence {
	return &Fence{lease: lease, now: time.Now, renewed: time.Now(), writers: map[string]io.Closer{}}
}

// Renew extends the lease: a heartbeat sent at sent was answered without
// error.
func (f *Fence) Renew(sent time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sent.After(f.renewed) {
		f.renewed = sent
	}
}

// Lose marks the fence lost for good (the group session failed, a writer
// was fenced): every later Check fails. The first cause is kept.
func (f *Fence) Lose(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost == nil {
		f.lost = cause
	}
}

// Check returns nil while the member may write: the fence was not lost
// and the lease has not run out. The error wraps ErrLost.
func (f *Fence) Check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost != nil {
		return fmt.Errorf("%w: %v", ErrLost, f.lost)
	}
	if age := f.now().Sub(f.renewed); age > f.lease {
		return fmt.Errorf("%w: no group heartbeat succeeded for %s (lease %s)", ErrLost, age.Round(time.Millisecond), f.lease)
	}
	return nil
}

// SetWriter keeps the writer of id (a refs partition) for the session,
// closing the one it replaces.
func (f *Fence) SetWriter(id string, w io.Closer) {
	f.mu.Lock()
	old := f.writers[id]
	f.writers[id] = w
	f.mu.Unlock()
	if old != nil && old != w {
		_ = old.Close()
	}
}

// Writer returns the writer of id, or nil when this session does not own
// id (or the fence is lost).
func (f *Fence) Writer(id string) io.Closer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost != nil {
		return nil
	}
	return f.writers[id]
}

// Drop closes and forgets the writers of ids (partitions revoked or lost).
func (f *Fence) Drop(ids ...string) {
	f.mu.Lock()
	var closing []io.Closer
	for _, id := range ids {
		if w := f.writers[id]; w != nil {
			closing = append(closing, w)
			delete(f.writers, id)
		}
	}
	f.mu.Unlock()
	for _, w := range closing {
		_ = w.Close()
	}
}

// Close closes every writer; the fence is lost afterwards.
func (f *Fence) Close() {
	f.Lose(errors.New("the group session ended"))
	f.mu.Lock()
	ids := make([]string, 0, len(f.writers))
	for id := range f.writers {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	slices.Sort(ids)
	f.Drop(ids...)
}

type ctxKey struct{}

// With returns ctx carrying f.
func With(ctx context.Context, f *Fence) context.Context {
	return context.WithValue(ctx, ctxKey{}, f)
}

// From returns the Fence ctx carries, or nil.
func From(ctx context.Context) *Fence {
	f, _ := ctx.Value(ctxKey{}).(*Fence)
	return f
}

// Check checks the Fence ctx carries; nil when it carries none (writes
// outside a build stage session, e.g. a backfill, are not fenced).
func Check(ctx context.Context) error {
	if f := From(ctx); f != nil {
		return f.Check()
	}
	return nil
}

// WriterID names the writer of a refs partition: "<topic>/<partition>".
func WriterID(topic string, partition int32) string {
	return fmt.Sprintf("%s/%d", topic, partition)
}
