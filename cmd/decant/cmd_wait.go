package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/wire"
)

var runWait = register(command{name: "wait", summary: "block until a WAL position is reflected in every sink",
	nargs: -1, flags: func(fs *flag.FlagSet) func(context.Context, *call) int {
		lsn := fs.String("lsn", "", "WAL position to wait for (SELECT pg_current_wal_lsn())")
		timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
		return func(ctx context.Context, c *call) int { return wait(ctx, c, *lsn, *timeout) }
	}})

func wait(ctx context.Context, c *call, lsnArg string, timeout time.Duration) int {
	lsn, err := wire.ParseLSN(lsnArg)
	if err != nil {
		return c.fail(2, fmt.Errorf("--lsn: %w", err))
	}
	cfg, err := config.Load(c.configPath, os.Environ())
	if err != nil {
		return c.fail(2, err)
	}
	st, err := openStackFrom(ctx, cfg, "decant-wait", c.stderr)
	if err != nil {
		return c.fail(1, err)
	}
	defer st.close()
	tracker, err := st.openTracker(ctx)
	if err != nil {
		return c.fail(1, err)
	}
	defer tracker.Close()
	es, err := indexer.NewClient(cfg.Elasticsearch)
	if err != nil {
		return c.fail(1, err)
	}
	started := time.Now()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := opsapi.WaitVisible(wctx, tracker, indexer.Refresher(es, st.model.Aggregates), lsn); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil {
			err = fmt.Errorf("%s not indexed within %s: %w", wire.FormatLSN(lsn), timeout, err)
		}
		return c.fail(1, err)
	}
	fmt.Fprintf(c.stdout, "%s indexed (waited %s)\n", wire.FormatLSN(lsn), time.Since(started).Round(time.Millisecond))
	return 0
}
