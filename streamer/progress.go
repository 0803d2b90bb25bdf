package streamer

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// progress decides how far the slot may be confirmed. Guarantee: the
// confirmed LSN never passes a transaction with a record Kafka has not
// acknowledged, because transactions are confirmed strictly in WAL order and
// only once their commit was seen and every one of their records acked.
//
// The replication loop calls open, add and close; the producer's callbacks
// call ack from other goroutines; confirmable is called by the loop.
type progress struct {
	mu        sync.Mutex
	queue     []*txnMark // open or unacknowledged transactions, in WAL order
	confirmed uint64
}

// txnMark counts the unacknowledged records of one transaction.
type txnMark struct {
	pending atomic.Int64
	closed  atomic.Bool
	end     uint64 // LSN to confirm once the transaction is fully acked

	// The decant-lsn header value of the transaction's records; used only
	// by the goroutine that produces them.
	lsn     uint64
	lsnText []byte
	// promise is the producer callback of the transaction's records.
	promise func(*kgo.Record, error)
}

func newProgress(start uint64) *progress { return &progress{confirmed: start} }

// open starts tracking a transaction (or a snapshot chunk) in WAL order.
func (p *progress) open() *txnMark {
	m := &txnMark{}
	p.mu.Lock()
	p.queue = append(p.queue, m)
	p.mu.Unlock()
	return m
}

// add counts one more record of m in flight.
func (m *txnMark) add() { m.pending.Add(1) }

// ack marks one record of m acknowledged by Kafka. Safe for concurrent use.
func (m *txnMark) ack() { m.pending.Add(-1) }

// close records that every record of m has been handed to the producer and
// that end is the LSN to confirm once they are acknowledged.
func (p *progress) close(m *txnMark, end uint64) {
	m.end = end
	m.closed.Store(true)
}

// confirmable pops fully acknowledged transactions from the head of the
// queue and returns the LSN the slot may be confirmed to.
func (p *progress) confirmable() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.queue {
		if !m.closed.Load() || m.pending.Load() > 0 {
			break
		}
		if m.end > p.confirmed {
			p.confirmed = m.end
		}
		n++
	}
	if n > 0 {
		p.queue = append(p.queue[:0], p.queue[n:]...)
	}
	return p.confirmed
}

// idle moves the confirmable position to walEnd when nothing is in flight:
// the server has sent everything before walEnd and none of it is pending.
func (p *progress) idle(walEnd uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 && walEnd > p.confirmed {
		p.confirmed = walEnd
	}
}

// inFlight is the number of transactions not yet confirmable.
func (p *progress) inFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}
