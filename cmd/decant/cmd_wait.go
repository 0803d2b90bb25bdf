package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/wire"
)

// waitFlags adds the flags of wait and returns its body.
func waitFlags(fs *flag.FlagSet) func(context.Context, *call) int {
	lsn := fs.String("lsn", "", "WAL position to wait for (SELECT pg_current_wal_lsn())")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	return func(ctx context.Context, c *call) int { return wait(ctx, c, *lsn, *timeout) }
}

func wait(ctx context.Context, c *call, lsnArg string, timeout time.Duration) int {
	lsn, err := wire.ParseLSN(lsnArg)
	if err != nil {
		return c.fail(2, fmt.Errorf("--lsn: %w", err))
	}
	v, code := c.openOpsView(ctx)
	if v == nil {
		return code
	}
	defer v.close()
	started := time.Now()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := opsapi.WaitVisible(wctx, v.tracker, indexer.Refreshers(v.engines, v.model.Aggregates), lsn); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil {
			err = fmt.Errorf("%s not indexed within %s: %w", wire.FormatLSN(lsn), timeout, err)
		}
		return c.fail(1, err)
	}
	fmt.Fprintf(c.stdout, "%s indexed (waited %s)\n", wire.FormatLSN(lsn), time.Since(started).Round(time.Millisecond))
	return 0
}
