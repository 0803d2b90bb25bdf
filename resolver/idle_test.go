package resolver

import "testing"

// TestIdleSignal: the channel buildAndWrite waits on while it holds a
// group is closed when the last write in flight, of any batch, ends, and
// not before; the next wait gets a new channel.
func TestIdleSignal(t *testing.T) {
	var b Builder
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	b.writing.Add(2)
	idle := b.idleSignal()
	if b.idleSignal() != idle {
		t.Fatal("two waiters got different channels")
	}
	b.writeDone()
	if closed(idle) {
		t.Fatal("closed with a write still in flight")
	}
	b.writeDone()
	if !closed(idle) {
		t.Fatal("not closed once no write is in flight")
	}
	b.writing.Add(1)
	next := b.idleSignal()
	if closed(next) {
		t.Fatal("the next wait's channel is already closed")
	}
	b.writeDone()
	if !closed(next) {
		t.Fatal("the next channel is not closed once the write ends")
	}
	// A write ending with no one waiting leaves nothing behind.
	b.writing.Add(1)
	b.writeDone()
	if c := b.idleSignal(); closed(c) {
		t.Fatal("a channel taken after the writes ended is closed: waiters must read the count after taking it")
	}
}
