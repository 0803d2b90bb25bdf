package streamer

import "testing"

func TestProgressConfirmsInOrderOnlyAfterAcks(t *testing.T) {
	p := newProgress(100)
	a, b := p.open(), p.open()
	a.add()
	a.add()
	b.add()
	p.close(a, 200)
	p.close(b, 300)
	b.ack() // b fully acked, but a is not: nothing may be confirmed past a
	if got := p.confirmable(); got != 100 {
		t.Fatalf("confirmable = %d, want 100 (a still pending)", got)
	}
	a.ack()
	if got := p.confirmable(); got != 100 {
		t.Fatalf("confirmable = %d, want 100 (a has one record pending)", got)
	}
	a.ack()
	if got := p.confirmable(); got != 300 {
		t.Fatalf("confirmable = %d, want 300", got)
	}
	if p.inFlight() != 0 {
		t.Fatalf("inFlight = %d, want 0", p.inFlight())
	}
}

func TestProgressOpenTransactionBlocksIdleAdvance(t *testing.T) {
	p := newProgress(10)
	m := p.open()
	p.idle(50)
	if got := p.confirmable(); got != 10 {
		t.Fatalf("confirmable = %d, want 10: an open transaction must block keepalive advance", got)
	}
	p.close(m, 40)
	if got := p.confirmable(); got != 40 {
		t.Fatalf("confirmable = %d, want 40", got)
	}
	p.idle(50)
	if got := p.confirmable(); got != 50 {
		t.Fatalf("confirmable = %d, want 50 after idle keepalive", got)
	}
	p.idle(45) // never backwards
	if got := p.confirmable(); got != 50 {
		t.Fatalf("confirmable = %d, want 50", got)
	}
}
