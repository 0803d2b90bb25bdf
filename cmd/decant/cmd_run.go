package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/streamer"
)

func init() {
	register("run", "run every stage (stream, map, build, index) in one process", runRun)
}

const runHelp = `Usage: decant run [--config decant.yaml] [--no-backfill]

Runs the whole pipeline in one process: the streamer (PostgreSQL → raw
topics), the map stage (raw changes → refs), the build stage (refs →
documents) and the sinks (aggregate topics and Elasticsearch), plus the HTTP
port with /metrics, /healthz, /readyz, /v1/watermarks and /v1/wait.

Everything is validated before anything is created: config keys, mappings
against the live catalog, and that PostgreSQL, Kafka and Elasticsearch
answer. On first start of an aggregate that has no documents yet, every
document is built (backfill). SIGTERM or Ctrl-C stops taking new work,
lets the streamer flush what it produced and confirm it, and exits 0; a map
or build batch cut short is not committed and is redone after restart, which
versions make harmless.

Examples:
  decant run --config decant.yaml
  DECANT_POSTGRES_DSN=postgres://decant:secret@db/shop DECANT_KAFKA_BROKERS=k1:9092,k2:9092 decant run

Flags:
`

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", runHelp, stderr)
	cfgPath := configFlag(fs)
	noBackfill := fs.Bool("no-backfill", false, "do not build every document of an aggregate that has none yet")
	if pos, code, ok := parseFlags(fs, args); !ok {
		return code
	} else if len(pos) > 0 {
		fmt.Fprintf(stderr, "decant run: unexpected argument %q\n", pos[0])
		return 2
	}
	cfg, err := config.Load(*cfgPath, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "decant run: %v\n", err)
		return 2
	}
	log := newLogger(cfg, stderr)
	if err := run(ctx, cfg, !*noBackfill, stderr); err != nil {
		var ve *validationError
		if errors.As(err, &ve) {
			fmt.Fprintf(stderr, "decant run: %v\nnothing was created; fix the above and start again (decant check helps)\n", ve.err)
			return 2
		}
		log.Error("decant run stopped", "err", err)
		return 1
	}
	log.Info("decant run stopped cleanly")
	return 0
}

// validationError is a problem found before any side effect.
type validationError struct{ err error }

func (e *validationError) Error() string { return e.err.Error() }
func (e *validationError) Unwrap() error { return e.err }

func run(ctx context.Context, cfg *config.Config, backfill bool, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	log.Info("starting decant run", "postgres", config.RedactDSN(cfg.Postgres.DSN), "kafka", cfg.Kafka.Brokers,
		"elasticsearch", cfg.Elasticsearch.URLs, "topic_prefix", cfg.Kafka.TopicPrefix)

	// 1. Validate everything before creating anything.
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return &validationError{fmt.Errorf("%w (check postgres.dsn)", err)}
	}
	model, cat, err := loadAndBind(ctx, cfg, conn)
	conn.Close(context.Background())
	if err != nil {
		return &validationError{err}
	}
	if err := requireBeforeImages(model, cat); err != nil {
		return &validationError{err}
	}
	kcl, adm, err := kafkaAdmin(ctx, cfg)
	if err != nil {
		return &validationError{err}
	}
	defer kcl.Close()
	es, err := esClientFromConfig(cfg)
	if err != nil {
		return &validationError{err}
	}
	if es != nil {
		if err := checkES(ctx, es, cfg); err != nil {
			return &validationError{err}
		}
	}

	// 2. Wire the stages.
	scfg, err := streamerConfig(ctx, cfg)
	if err != nil {
		return err
	}
	pool, err := resolver.NewPool(ctx, cfg.Postgres.DSN, "decant-run", 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := newRegistry(cfg, pool)
	scfg.Logger, scfg.Registerer = log, reg
	str, err := streamer.New(scfg)
	if err != nil {
		return &validationError{err}
	}
	defer str.Close()

	// A new slot means an initial snapshot, whose rows make the map stage
	// rebuild every document; otherwise backfill aggregates that have none.
	var slotExists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, cfg.Postgres.Slot).Scan(&slotExists); err != nil {
		return err
	}
	kopts, err := kafkaOpts(cfg)
	if err != nil {
		return &validationError{err}
	}
	st := &resolverSetup{cfg: cfg, model: model, pool: pool, log: log, reg: reg, rcfg: resolver.Config{
		Kafka: kopts, TopicPrefix: cfg.Kafka.TopicPrefix, Group: cfg.Resolver.Group,
		Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor,
		BatchSize: cfg.Resolver.BatchSize, Logger: log, Registerer: reg,
	}}
	sink, closeSinks, err := newSinks(ctx, st)
	if err != nil {
		return err
	}
	defer closeSinks()
	mapper, err := resolver.NewMapper(st.rcfg, model, pool)
	if err != nil {
		return err
	}
	defer mapper.Close()
	builder, err := resolver.NewBuilder(st.rcfg, model, pool, sink)
	if err != nil {
		return err
	}
	defer builder.Close()
	ops := newOpsServer(log, newTracker(cfg, model, pool, adm), esRefresher(es, model), reg)

	// 3. Run until ctx ends or a stage fails; a failing stage stops the others.
	g, gctx := errgroup.WithContext(ctx)
	stage := func(name string, f func(context.Context) error) {
		g.Go(func() error {
			ops.setStage(name, true)
			defer ops.setStage(name, false)
			if err := f(gctx); err != nil {
				return fmt.Errorf("%s stage: %w", name, err)
			}
			if ctx.Err() == nil && gctx.Err() == nil {
				return fmt.Errorf("%s stage returned unexpectedly", name)
			}
			return nil
		})
	}
	stage("stream", str.Run)
	stage("map", mapper.Run)
	stage("build", builder.Run)
	g.Go(func() error { return ops.serve(gctx, cfg.HTTP.Listen) })
	if backfill && (slotExists || cfg.Streamer.SnapshotMode == "never") {
		g.Go(func() error { autoBackfill(gctx, st); return nil })
	}
	err = g.Wait()
	if ctx.Err() != nil && err == nil {
		return nil
	}
	return err
}

// autoBackfill builds every document of each aggregate that has none yet
// (first start), through the refs topic like any other build.
func autoBackfill(ctx context.Context, st *resolverSetup) {
	for _, a := range st.model.Aggregates {
		need, err := resolver.NeedsBackfill(ctx, st.rcfg, a.Name)
		if err != nil {
			st.log.Warn("cannot tell whether the aggregate needs a backfill; run 'decant backfill' if documents are missing", "aggregate", a.Name, "err", err)
			continue
		}
		if !need {
			continue
		}
		started := time.Now()
		st.log.Info("first start of aggregate: backfilling every document", "aggregate", a.Name)
		last := time.Now()
		b, err := resolver.Backfill(ctx, st.rcfg, st.pool, st.model, a.Name, resolver.BackfillOptions{Progress: func(done, total int64) {
			if time.Since(last) > 5*time.Second {
				st.log.Info("backfill progress", "aggregate", a.Name, "enqueued", done, "total", total)
				last = time.Now()
			}
		}})
		if err != nil {
			if ctx.Err() == nil {
				st.log.Error("backfill failed; run 'decant backfill "+a.Name+"' to retry", "aggregate", a.Name, "err", err)
			}
			continue
		}
		st.log.Info("backfill enqueued", "aggregate", a.Name, "ids", b.Count, "took", time.Since(started).Round(time.Millisecond))
	}
}
