package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/mappings"
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
	env, err := openOps(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "decant wait: %v\n", err)
		return 1
	}
	defer env.close()
	started := time.Now()
	wctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := waitVisible(wctx, env.tracker, esRefresher(env.es, env.model), lsn); err != nil {
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

// opsEnv is what wait and status read: the database, Kafka, Elasticsearch
// and the model.
type opsEnv struct {
	cfg     *config.Config
	pool    *pgxpool.Pool
	model   *mappings.Model
	tracker *watermark.Tracker
	es      *elasticsearch.Client
	closers []func()
}

func (e *opsEnv) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func openOps(ctx context.Context, cfg *config.Config) (*opsEnv, error) {
	env := &opsEnv{cfg: cfg}
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return nil, err
	}
	model, _, err := loadAndBind(ctx, cfg, conn)
	conn.Close(context.Background())
	if err != nil {
		return nil, err
	}
	env.model = model
	env.pool, err = pgxpool.New(ctx, cfg.Postgres.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	env.closers = append(env.closers, env.pool.Close)
	cl, adm, err := kafkaAdmin(ctx, cfg)
	if err != nil {
		env.close()
		return nil, err
	}
	env.closers = append(env.closers, cl.Close)
	env.tracker = newTracker(cfg, model, env.pool, adm)
	if env.es, err = esClientFromConfig(cfg); err != nil {
		env.close()
		return nil, err
	}
	return env, nil
}
