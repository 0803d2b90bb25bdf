package resolver

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// TestScanKeysEndsInsideAnAbortedTransaction: scanKeys takes a topic's end
// offsets while a transaction is open in it, and the transaction then
// aborts (a build member killed mid-write, fenced by its successor). Read
// committed, the aborted records are skipped and the next record is the
// abort marker, at the end offset: the scan must end there. It waited for
// a record at end-1 forever (a chaos run's map stage hung for minutes in a
// truncation rebuild, scanning the aggregate topic).
func TestScanKeysEndsInsideAnAbortedTransaction(t *testing.T) {
	k := testenv.Kafka(t)
	ctx := testenv.Ctx(t)
	topic := k.Prefix + ".scan"
	if err := wire.EnsureTopic(ctx, k.Admin, topic, 1, 1, 0, nil); err != nil {
		t.Fatal(err)
	}
	w, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.TransactionalID(k.Prefix+".scan-writer"), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	txn := func(end kgo.TransactionEndTry, keys ...string) {
		t.Helper()
		if err := w.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, key := range keys {
			if err := w.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if end != kgo.TryAbort || len(keys) == 0 {
			if err := w.EndTransaction(ctx, end); err != nil {
				t.Fatal(err)
			}
		}
	}
	txn(kgo.TryCommit, "a")     // offsets 0 and its marker 1
	txn(kgo.TryAbort, "b", "c") // offsets 2 and 3, open: the end offset is 4

	type result struct {
		keys []string
		err  error
	}
	done := make(chan result, 1)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		var keys []string
		err := scanKeys(sctx, []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, topic, func(key []byte) error {
			keys = append(keys, string(key))
			return nil
		})
		done <- result{keys, err}
	}()
	// The scan reads its end offsets at once; the abort comes after.
	time.Sleep(time.Second)
	if err := w.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("scanKeys: %v (keys %v)", r.err, r.keys)
		}
		if !slices.Equal(r.keys, []string{"a"}) {
			t.Fatalf("scanKeys read %v, want [a]: only the committed record", r.keys)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("scanKeys did not return 20 s after the transaction holding its end offset aborted")
	}
}
