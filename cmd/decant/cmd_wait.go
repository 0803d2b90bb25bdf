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

const waitHelp = `Usage: decant wait --lsn LSN [--timeout 30s] [--config decant.yaml]

Returns (exit 0) once every change committed at or before LSN is in the
aggregate topics and Elasticsearch, and searchable; exit 1 on timeout. It
reads the stages' progress from PostgreSQL and Kafka, so it works whether the
stages run in one 'decant run' or in separate processes.

Examples:
  LSN=$(psql -Atc 'SELECT pg_current_wal_lsn()') && decant wait --lsn "$LSN"
  decant wait --lsn 0/16B3748 --timeout 5s

Flags:
`

func runWait(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("wait", waitHelp, stderr)
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
