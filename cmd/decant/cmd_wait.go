package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/watermark"
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
		fmt.Fprintf(stderr, "decant wait: --lsn: %v\n", err)
		return 2
	}
	cfg, err := config.Load(*cfgPath, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "decant wait: %v\n", err)
		return 2
	}
	env, err := openWatch(ctx, cfg, "decant-wait", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "decant wait: %v\n", err)
		return 1
	}
	defer env.close()
	started := time.Now()
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := opsapi.WaitVisible(wctx, env.tracker, indexer.Refresher(env.es, env.aliases()), lsn); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil {
			fmt.Fprintf(stderr, "decant wait: %s not indexed within %s: %v\n", wire.FormatLSN(lsn), *timeout, err)
		} else {
			fmt.Fprintf(stderr, "decant wait: %v\n", err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s indexed (waited %s)\n", wire.FormatLSN(lsn), time.Since(started).Round(time.Millisecond))
	return 0
}

// watch is what wait and status read: the stack, a watermark tracker and
// the Elasticsearch client (nil without a search sink).
type watch struct {
	*stack
	tracker *watermark.Tracker
	es      *elasticsearch.Client
	kcl     *kgo.Client
}

func (w *watch) close() { w.kcl.Close(); w.stack.close() }

func openWatch(ctx context.Context, cfg *config.Config, appName string, stderr io.Writer) (*watch, error) {
	st, err := openStackFrom(ctx, cfg, appName, stderr)
	if err != nil {
		return nil, err
	}
	cl, adm, err := openKafka(ctx, cfg)
	if err != nil {
		st.close()
		return nil, err
	}
	w := &watch{stack: st, tracker: st.tracker(adm), kcl: cl}
	if w.es, err = indexer.NewClient(cfg.Elasticsearch); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}
