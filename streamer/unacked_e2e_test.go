package streamer

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// partition is a Kafka dialer the test can cut off from the broker, as a
// network partition or a broker outage would: cut closes every open
// connection and refuses new ones until heal.
type partition struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (p *partition) dial(ctx context.Context, network, host string) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		// What a stopped broker answers.
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		p.conns = append(p.conns, c)
	}
	return c, err
}

func (p *partition) set(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

// TestFailedSessionLeavesNothingToWrite: a session that ends while Kafka is
// unreachable (here its replication connection is terminated while the
// broker is cut off) returns without waiting for Kafka, and nothing it had
// produced is written once Kafka is reachable again: another streamer may
// have taken the slot by then, and a late record would overwrite its newer
// ones in the compacted raw topic. The next session streams those rows
// again from the slot, so nothing is lost.
func TestFailedSessionLeavesNothingToWrite(t *testing.T) {
	e := newEnv(t, `CREATE TABLE u (id int PRIMARY KEY, n int NOT NULL)`)
	p := &partition{}
	e.cfg.Kafka = append(e.cfg.Kafka, kgo.Dialer(p.dial))
	s, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- s.session(ctx) }()
	e.waitSnapshotMarker()
	topic := wire.RawTopic(e.k.Prefix, "public", "u")
	e.pg.Exec(t, `INSERT INTO u SELECT g, 0 FROM generate_series(1, 10) g`)
	e.waitRecords(topic, 10)

	p.set(true)
	e.pg.Exec(t, `INSERT INTO u SELECT g, 1 FROM generate_series(11, 30) g`)
	testenv.WaitFor(t, "the 20 new rows buffered in the streamer's Kafka client", 30*time.Second, func() (bool, error) {
		return s.kafka.BufferedProduceRecords() >= 20, nil
	})
	e.pg.Exec(t, fmt.Sprintf(`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = '%s'`, e.cfg.Slot))
	began := time.Now()
	select {
	case err := <-ended:
		t.Logf("session ended after %s: %v", time.Since(began).Round(time.Millisecond), err)
		if err == nil {
			t.Fatal("the session ended without an error though its replication connection was terminated")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the session did not end within 15 s of losing its replication connection while Kafka was unreachable")
	}
	if n := s.kafka.BufferedProduceRecords(); n != 0 {
		t.Fatalf("%d records of the ended session are still in the Kafka client, to be written after whoever streams next", n)
	}

	p.set(false)
	// A record produced now is written after anything the client still
	// had for the partition (one partition, in order).
	if err := s.kafka.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(`{"probe":1}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	recs := e.readTopic(topic)
	if len(recs) != 11 || recs[10].Key != `{"probe":1}` {
		keys := make([]string, len(recs))
		for i, r := range recs {
			keys[i] = r.Key
		}
		t.Fatalf("the raw topic holds %d records %v; want the 10 acknowledged before the cut, then the probe: the ended session's records were written after it ended", len(recs), keys)
	}

	// No loss: the next session sends the 20 rows again from the slot.
	go func() { ended <- s.session(ctx) }()
	testenv.WaitFor(t, "the next session to stream the 20 rows again", time.Minute, func() (bool, error) {
		return len(e.readTopic(topic)) >= 31, nil
	})
	got := lastPerKey(e.readTopic(topic))
	delete(got, `{"probe":1}`)
	sameState(t, got, e.tableState("u", `jsonb_build_object('id', id)::text`))
	cancel()
	if err := <-ended; err != nil {
		t.Fatalf("stopped session: %v", err)
	}
}
