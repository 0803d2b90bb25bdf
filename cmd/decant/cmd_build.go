package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/resolver"
	"github.com/decant-cdc/decant/watermark"
	"github.com/decant-cdc/decant/wire"
)

// newBuildStage opens the sinks the config asks for (indexer.OpenSinks:
// the aggregate topics, and Elasticsearch and OpenSearch when their urls
// are set) and the builder that writes to them; closing the stage closes
// the sinks. Indexes created for a bulk load (or left loading by an
// earlier process) are finished beside the stage (finishLoads).
func newBuildStage(ctx context.Context, st *stack) (stage, int, error) {
	engines, err := indexer.Engines(st.cfg)
	if err != nil {
		return stage{}, 1, err
	}
	reindexes, err := indexer.PrepareReindexes(ctx, engines, st.model.Aggregates, st.cfg.Indexer.AutoReindex, indexer.ReindexOptions{Logger: st.log})
	if err != nil {
		return stage{}, 1, err
	}
	ks, search, loads, err := indexer.OpenSinks(ctx, st.cfg, st.model.Aggregates, st.kopts, st.log, st.reg)
	if err != nil {
		return stage{}, 1, err
	}
	sink := resolver.Sinks{ks}
	for _, s := range search {
		sink = append(sink, s)
	}
	closeSinks := func() {
		for _, s := range search {
			s.Close()
		}
		ks.Close()
	}
	b, err := resolver.NewBuilder(st.rcfg, st.model, st.build, sink)
	if err != nil {
		closeSinks()
		return stage{}, 1, err
	}
	run := b.Run
	if len(loads) > 0 || len(reindexes) > 0 {
		run = func(ctx context.Context) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			// The stage's end waits for finishLoads: a load whose settings
			// just came back is unmarked before the process exits
			// (indexer.FinishLoad), not left for the next start.
			var finishing sync.WaitGroup
			if len(loads) > 0 {
				finishing.Go(func() { st.finishLoads(ctx, loads) })
			}
			for _, r := range reindexes {
				go st.finishReindex(ctx, r)
			}
			err := b.Run(ctx)
			cancel()
			finishing.Wait()
			return err
		}
	}
	return stage{run, closeSinks}, 0, nil
}

// finishReindex rebuilds every document of a reindexed aggregate through
// the build stage beside it (the sinks write them to both indexes), then
// swaps the alias on each engine. Failures are retried while the stage
// runs; a restart before the swap resumes the reindex.
func (s *stack) finishReindex(ctx context.Context, r indexer.PendingReindex) {
	log := s.log.With("stage", "build", "aggregate", r.Spec.Aggregate)
	started := time.Now()
	if r.Resumed {
		log.Info("resuming the reindex an earlier process started", "alias", r.Spec.Alias, "new", r.Spec.IndexName())
	}
	for backoff := time.Second; ; backoff = min(2*backoff, time.Minute) {
		err := s.reindexOnce(ctx, r, log)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("reindex failed; retrying", "err", err, "backoff", backoff)
		if !ctxtime.Sleep(ctx, backoff) {
			return
		}
	}
	log.Info("reindex finished: the alias points at the index of the current mappings", "alias", r.Spec.Alias, "index", r.Spec.IndexName(),
		"took", time.Since(started).Round(time.Millisecond))
}

func (s *stack) reindexOnce(ctx context.Context, r indexer.PendingReindex, log *slog.Logger) error {
	last := time.Now()
	progress := func(what string) func(done, total int64) {
		return func(done, total int64) {
			if time.Since(last) >= 10*time.Second || done == total {
				log.Info("reindex progress", "step", what, "done", done, "total", total)
				last = time.Now()
			}
		}
	}
	b, err := resolver.Backfill(ctx, s.rcfg, s.pool, s.model, r.Spec.Aggregate, resolver.BackfillOptions{Progress: progress("enqueue")})
	if err != nil {
		return err
	}
	if err := resolver.WaitBuilt(ctx, s.rcfg, b, progress("build")); err != nil {
		return err
	}
	for _, e := range r.Engines {
		if err := indexer.SwapAlias(ctx, e.Client, r.Spec, indexer.ReindexOptions{Logger: log}); err != nil {
			return fmt.Errorf("%s: %w", e.Kind, err)
		}
	}
	return nil
}

// finishLoads waits until every change committed before it started has
// passed every stage — the initial snapshot included, so the first
// start's documents are all written — then gives each index its mapping's
// refresh interval and replica count back (indexer.FinishLoad). A restart
// before that finds the indexes still loading and does it then. Finishing
// early (a first-start backfill still enqueueing) would only cost speed.
func (s *stack) finishLoads(ctx context.Context, loads []indexer.Load) {
	started := time.Now()
	for _, l := range loads {
		s.log.Info("index created for a bulk load: refresh off and no replicas until the initial load has passed every stage (searches see its documents then; /v1/wait refreshes as it needs)",
			"stage", "build", "sink", l.Kind, "aggregate", l.Spec.Aggregate, "index", l.Index)
	}
	wcfg := watermark.ConfigFrom(s.cfg, s.model)
	wcfg.Poll = time.Second
	backoff := time.Second
	for {
		err := s.waitLoaded(ctx, wcfg)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("cannot tell yet whether the initial load is done; retrying", "stage", "build", "err", err, "backoff", backoff)
		if !ctxtime.Sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, time.Minute)
	}
	for _, l := range loads {
		for backoff = time.Second; ; backoff = min(2*backoff, time.Minute) {
			_, err := indexer.FinishLoad(ctx, l.Search, l.Spec, l.Index)
			if err == nil {
				s.log.Info("initial load complete: the index has its mapping's settings again", "stage", "build", "sink", l.Kind,
					"aggregate", l.Spec.Aggregate, "index", l.Index, "took", time.Since(started).Round(time.Millisecond))
				break
			}
			if ctx.Err() != nil {
				return // stopping: the next start finishes it
			}
			s.log.Warn("cannot restore the index settings after its bulk load; retrying", "stage", "build", "sink", l.Kind, "index", l.Index, "err", err, "backoff", backoff)
			if !ctxtime.Sleep(ctx, backoff) {
				return
			}
		}
	}
}

// waitLoaded waits until every change committed now has passed every stage.
func (s *stack) waitLoaded(ctx context.Context, wcfg watermark.Config) error {
	var cur string
	if err := s.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&cur); err != nil {
		return err
	}
	lsn, err := wire.ParseLSN(cur)
	if err != nil {
		return err
	}
	t, err := watermark.Dial(ctx, wcfg, s.pool, s.kopts)
	if err != nil {
		return err
	}
	defer t.Close()
	return t.Wait(ctx, lsn)
}
