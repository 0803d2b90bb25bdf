package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/streamer"
	"github.com/decant-cdc/decant/wire"
)

// snapshotFlags adds the flags of snapshot and returns its body.
func snapshotFlags(fs *flag.FlagSet) func(context.Context, *call) int {
	noWait := fs.Bool("no-wait", false, "return once the snapshot is requested")
	timeout := fs.Duration("timeout", 0, "give up waiting after this long (0: wait until done)")
	return func(ctx context.Context, c *call) int { return snapshot(ctx, c, *noWait, *timeout) }
}

// snapshot requests an online snapshot of one table from the streamer
// (streamer.RequestTableSnapshot) and waits for it, with a progress line.
// The table is checked before the request is written.
func snapshot(ctx context.Context, c *call, noWait bool, timeout time.Duration) int {
	table := c.args[0]
	if !strings.Contains(table, ".") {
		table = "public." + table
	}
	cfg, err := config.Load(c.configPath, os.Environ())
	if err != nil {
		return c.fail(2, err)
	}
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return c.fail(1, err)
	}
	err = streamer.CheckOnlineTable(ctx, conn, cfg.Postgres.Publication, cfg.Postgres.CreatePublication, table)
	conn.Close(context.Background())
	if err != nil {
		return c.fail(1, err)
	}
	kopts, err := cfg.Kafka.ClientOptions()
	if err != nil {
		return c.fail(2, err)
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return c.fail(1, err)
	}
	defer cl.Close()
	state := wire.StateTopic(cfg.Kafka.TopicPrefix)
	if td, err := kadm.NewClient(cl).ListTopics(ctx, state); err != nil {
		return c.fail(1, fmt.Errorf("kafka: %w", err))
	} else if !td.Has(state) || td[state].Err != nil {
		return c.fail(1, fmt.Errorf("topic %s does not exist: no streamer has run with kafka.topic_prefix %q; start decant run or decant stream first", state, cfg.Kafka.TopicPrefix))
	}
	requested := time.Now().UTC().Format(time.RFC3339Nano)
	req := wire.TableSnapshot{Slot: cfg.Postgres.Slot, Table: table, Time: requested}
	if err := streamer.RequestTableSnapshot(ctx, cl, cfg.Kafka.TopicPrefix, req); err != nil {
		return c.fail(1, err)
	}
	fmt.Fprintf(c.stderr, "requested an online snapshot of %s from the streamer of slot %s\n", table, cfg.Postgres.Slot)
	if noWait {
		return 0
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var last int64 = -1
	for {
		ts, ok, err := streamer.ReadTableSnapshot(ctx, kopts, cfg.Kafka.TopicPrefix, cfg.Postgres.Slot, table)
		if err != nil && ctx.Err() == nil {
			return c.fail(1, err)
		}
		if ok && (ts.Time != requested || ts.ID != "") { // the streamer took it up (or someone asked again)
			switch {
			case ts.Error != "":
				return c.fail(1, fmt.Errorf("the streamer refused the snapshot of %s: %s", table, ts.Error))
			case ts.Done:
				fmt.Fprintf(c.stdout, "snapshot of %s done: %d rows\n", table, ts.Rows)
				return 0
			case ts.Rows != last:
				fmt.Fprintf(c.stderr, "snapshot of %s: %d rows so far\n", table, ts.Rows)
				last = ts.Rows
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return c.fail(1, fmt.Errorf("snapshot of %s not done within %s; it goes on in the streamer (decant snapshot %s --no-wait does not wait)", table, timeout, table))
			}
			return c.fail(1, errors.New("stopped waiting; the snapshot goes on in the streamer"))
		case <-time.After(time.Second):
		}
	}
}
