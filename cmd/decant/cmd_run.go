package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/elastic/go-elasticsearch/v8"
	"golang.org/x/sync/errgroup"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/streamer"
	"github.com/decant-cdc/decant/watermark"
)

var runRun = register(command{name: "run", summary: "run every stage (stream, map, build, index) in one process",
	flags: func(fs *flag.FlagSet) func(context.Context, *call) int {
		noBackfill := fs.Bool("no-backfill", false, "do not build every document of an aggregate that has none yet")
		return func(ctx context.Context, c *call) int { return runAll(ctx, c, !*noBackfill) }
	}})

func runAll(ctx context.Context, c *call, backfill bool) int {
	cfg, err := config.Load(c.configPath, os.Environ())
	if err != nil {
		return c.fail(2, err)
	}
	log := cfg.Log.NewLogger(c.stderr)
	if err := run(ctx, cfg, backfill, c.stderr); err != nil {
		var ve *validationError
		if errors.As(err, &ve) {
			return c.fail(2, fmt.Errorf("%w\nnothing was created; fix the above and start again (decant check helps)", ve.err))
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
	// 1. Validate everything before creating anything.
	st, tracker, es, closeAll, err := openRun(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer closeAll()

	// 2. Wire the stages.
	str, err := streamer.New(st.streamerConfig())
	if err != nil {
		return &validationError{err}
	}
	defer str.Close()
	if backfill { // decided before the streamer creates the slot
		if backfill, err = resolver.FirstStartBackfill(ctx, st.pool, cfg.Postgres.Slot, cfg.Streamer.SnapshotMode); err != nil {
			return err
		}
	}
	sink, closeSinks, err := newSinks(ctx, st)
	if err != nil {
		return err
	}
	defer closeSinks()
	mapper, err := resolver.NewMapper(st.rcfg, st.model, st.pool)
	if err != nil {
		return err
	}
	defer mapper.Close()
	builder, err := resolver.NewBuilder(st.rcfg, st.model, st.pool, sink)
	if err != nil {
		return err
	}
	defer builder.Close()
	ops := opsapi.NewServer(st.log, tracker, indexer.Refresher(es, st.model.Aggregates), st.reg)

	// 3. Run until ctx ends or a stage fails; a failing stage stops the others.
	g, gctx := errgroup.WithContext(ctx)
	stage := func(name string, f func(context.Context) error) {
		g.Go(func() error {
			ops.SetStage(name, true)
			defer ops.SetStage(name, false)
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
	g.Go(func() error { return ops.Serve(gctx, cfg.HTTP.Listen) })
	if backfill {
		g.Go(func() error { resolver.BackfillEmpty(gctx, st.rcfg, st.pool, st.model); return nil })
	}
	err = g.Wait()
	if ctx.Err() != nil && err == nil {
		return nil
	}
	return err
}

// openRun checks that the mappings bind, the before images suffice, and
// PostgreSQL, Kafka and Elasticsearch answer; every error is a
// *validationError. closeAll closes what it opened.
func openRun(ctx context.Context, cfg *config.Config, stderr io.Writer) (st *stack, tracker *watermark.Tracker, es *elasticsearch.Client, closeAll func(), err error) {
	log := cfg.Log.NewLogger(stderr)
	log.Info("starting decant run", "postgres", config.RedactDSN(cfg.Postgres.DSN), "kafka", cfg.Kafka.Brokers,
		"elasticsearch", cfg.Elasticsearch.URLs, "topic_prefix", cfg.Kafka.TopicPrefix)
	var closeKafka func()
	fail := func(err error) (*stack, *watermark.Tracker, *elasticsearch.Client, func(), error) {
		return nil, nil, nil, nil, &validationError{err}
	}
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return fail(fmt.Errorf("%w (check postgres.dsn)", err))
	}
	model, cat, err := loadAndBind(ctx, cfg, conn)
	conn.Close(context.Background())
	if err != nil {
		return fail(err)
	}
	if err := mappings.RequireBeforeImages(model, cat); err != nil {
		return fail(err)
	}
	if st, err = newStack(ctx, cfg, model, cat, "decant-run", stderr); err != nil {
		return fail(err)
	}
	if tracker, closeKafka, err = st.openTracker(ctx); err != nil {
		st.close()
		return fail(err)
	}
	if es, err = indexer.NewClient(cfg.Elasticsearch); err == nil && es != nil {
		err = indexer.Ping(ctx, es, cfg.Elasticsearch.URLs)
	}
	if err != nil {
		closeKafka()
		st.close()
		return fail(err)
	}
	return st, tracker, es, func() { st.close(); closeKafka() }, nil
}
