package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/wire"
)

func init() {
	register("wait", "block until a WAL position is reflected in every sink", runWait)
}

func runWait(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("wait", stderr)
	cfgPath := configFlag(fs)
	lsnArg := fs.String("lsn", "", "WAL position to wait for (SELECT pg_current_wal_lsn())")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if _, code, ok := parseFlags(fs, args); !ok {
		return code
	}
	lsn, err := wire.ParseLSN(*lsnArg)
	if err != nil {
		return fail(stderr, "wait", 2, fmt.Errorf("--lsn: %w", err))
	}
	cfg, err := config.Load(*cfgPath, os.Environ())
	if err != nil {
		return fail(stderr, "wait", 2, err)
	}
	w, err := openWatch(ctx, cfg, "decant-wait", stderr)
	if err != nil {
		return fail(stderr, "wait", 1, err)
	}
	defer w.close()
	started := time.Now()
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := opsapi.WaitVisible(wctx, w.tracker, indexer.Refresher(w.es, w.aliases()), lsn); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil {
			err = fmt.Errorf("%s not indexed within %s: %w", wire.FormatLSN(lsn), *timeout, err)
		}
		return fail(stderr, "wait", 1, err)
	}
	fmt.Fprintf(stdout, "%s indexed (waited %s)\n", wire.FormatLSN(lsn), time.Since(started).Round(time.Millisecond))
	return 0
}
