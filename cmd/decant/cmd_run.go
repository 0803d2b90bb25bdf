package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/procs"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/streamer"
	"github.com/decant-cdc/decant/watermark"
)

func runAll(ctx context.Context, c *call, noBackfill bool) int {
	cfg, err := config.Load(c.configPath, os.Environ())
	if err != nil {
		return c.fail(2, err)
	}
	p, err := openPipeline(ctx, cfg, c.stderr)
	if err != nil {
		return c.fail(2, fmt.Errorf("%w\nnothing was created; fix the above and start again (decant check helps)", err))
	}
	defer p.close()
	if err := p.run(ctx, !noBackfill); err != nil {
		p.log.Error("decant run stopped", "err", err)
		return 1
	}
	p.log.Info("decant run stopped cleanly")
	return 0
}

// pipeline is what `decant run` opens and checks before it creates
// anything: the stack, the watermark tracker, the search engines (none
// without a search sink) and the streamer.
type pipeline struct {
	*stack
	tracker *watermark.Tracker
	engines []indexer.Engine
	str     *streamer.Streamer
}

// openPipeline checks that the mappings bind, the before images suffice,
// PostgreSQL, Kafka and Elasticsearch answer and the streamer's config is
// valid. It has no side effect.
func openPipeline(ctx context.Context, cfg *config.Config, stderr io.Writer) (*pipeline, error) {
	cfg.Log.NewLogger(stderr).Info("starting decant run", "postgres", config.RedactDSN(cfg.Postgres.DSN), "kafka", cfg.Kafka.Brokers,
		"elasticsearch", config.RedactURLs(cfg.Elasticsearch.URLs), "opensearch", config.RedactURLs(cfg.OpenSearch.URLs), "topic_prefix", cfg.Kafka.TopicPrefix)
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return nil, err
	}
	model, cat, err := loadAndBind(ctx, cfg, conn)
	conn.Close(context.Background())
	if err == nil {
		err = mappings.RequireBeforeImages(model, cat)
	}
	if err != nil {
		return nil, err
	}
	st, err := newStack(ctx, cfg, model, cat, "decant-run", stderr)
	if err != nil {
		return nil, err
	}
	p := &pipeline{stack: st}
	if p.tracker, err = st.openTracker(ctx); err == nil {
		if p.engines, err = indexer.Engines(cfg); err == nil {
			err = indexer.CheckAll(ctx, p.engines)
		}
	}
	if err == nil {
		p.str, err = streamer.New(st.streamerConfig())
	}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *pipeline) close() {
	if p.str != nil {
		p.str.Close()
	}
	if p.tracker != nil {
		p.tracker.Close()
	}
	p.stack.close()
}

// run wires the map and build stages to the sinks and runs every stage
// until ctx ends or one fails; a failing stage stops the others, except
// one whose SQL no longer matches the database: it stops alone
// (stageStopped) and /readyz says so. With
// backfill, aggregates with no documents yet are backfilled (first start).
func (p *pipeline) run(ctx context.Context, backfill bool) error {
	st, cfg := p.stack, p.cfg
	firstStart, err := resolver.FirstStartBackfill(ctx, st.pool, cfg.Postgres.Slot, cfg.Streamer.Snapshots())
	if err != nil {
		return err
	}
	mapper, err := resolver.NewMapper(st.rcfg, st.model, st.pool)
	if err != nil {
		return err
	}
	builder, _, err := newBuildStage(ctx, st)
	if err != nil {
		return err
	}
	defer builder.close()
	ops := opsapi.NewServer(st.log, p.tracker, indexer.Refreshers(p.engines, st.model.Aggregates), st.reg, opsOptions(cfg))
	registerAll(st.reg, ops.Collectors())
	ops.SetDocumentCounter(documentCounter(p.engines, st.model))
	g, gctx := errgroup.WithContext(ctx)
	stage := func(name string, f func(context.Context) error) {
		g.Go(func() error {
			ops.SetStage(name, true)
			err := f(gctx)
			if err != nil && stageStopped(gctx, st.log, ops, cfg, st.pool, name, err) {
				<-gctx.Done() // stopped; the other stages go on
				return nil
			}
			ops.SetStage(name, false)
			if err != nil {
				ops.StageExited(name, err)
				return fmt.Errorf("%s stage: %w", name, err)
			}
			if ctx.Err() == nil && gctx.Err() == nil {
				return fmt.Errorf("%s stage returned unexpectedly", name)
			}
			return nil
		})
	}
	stage("stream", p.str.Run)
	stage("map", mapper.Run)
	stage("build", builder.run)
	g.Go(func() error { return ops.Serve(gctx, cfg.HTTP.Listen) })
	g.Go(func() error { procs.Run(gctx, st.log, time.Second); return nil })
	if backfill && firstStart { // decided before the streamer creates the slot
		g.Go(func() error { resolver.BackfillEmpty(gctx, st.rcfg, st.pool, st.model); return nil })
	}
	return g.Wait()
}
