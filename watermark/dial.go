package watermark

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Dial connects to Kafka with kopts, checks within 15 seconds that a broker
// answers, and returns a Tracker that owns the client: Close closes it.
func Dial(ctx context.Context, cfg Config, db Querier, kopts []kgo.Opt) (*Tracker, error) {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	adm := kadm.NewClient(cl)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := adm.BrokerMetadata(cctx); err != nil {
		cl.Close()
		return nil, err
	}
	t := New(cfg, db, adm, kopts)
	t.client = cl
	return t, nil
}

// Close closes the Kafka client Dial opened; it does nothing for a
// Tracker made with New. It is idempotent.
func (t *Tracker) Close() {
	if t.client != nil {
		t.closeOnce.Do(t.client.Close)
	}
}
