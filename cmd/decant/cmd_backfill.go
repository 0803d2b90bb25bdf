package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/resolver"
)

func init() {
	register("backfill", "rebuild every document of an aggregate (--reindex: into a new index)", runBackfill)
}

func runBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("backfill", stderr)
	configPath := configFlag(fs)
	job := &backfillJob{stdout: stdout, stderr: stderr}
	fs.BoolVar(&job.reindex, "reindex", false, "build into a new index and swap the alias when done")
	fs.BoolVar(&job.build, "build", false, "run a build stage in this process while waiting")
	fs.BoolVar(&job.noWait, "no-wait", false, "return once the ids are enqueued")
	pos, code, ok := parseFlags(fs, args)
	if !ok {
		return code
	}
	if !wantArgs(stderr, "backfill", pos, 1, "name one aggregate, e.g. decant backfill customer") {
		return 2
	}
	if job.reindex && job.noWait {
		return fail(stderr, "backfill", 2, errors.New("--reindex waits for the documents before it swaps the alias; drop --no-wait"))
	}
	st, err := openStack(ctx, *configPath, "decant-backfill", stderr)
	if err != nil {
		return fail(stderr, "backfill", 1, err)
	}
	defer st.close()
	if job.a, err = st.model.FindAggregate(pos[0]); err != nil {
		return fail(stderr, "backfill", 1, err)
	}
	job.st = st
	ctx, cancel := context.WithCancel(ctx)
	defer job.stop(cancel)
	if job.reindex {
		return job.runReindex(ctx)
	}
	if job.build {
		if err := job.startBuild(ctx); err != nil {
			return fail(stderr, "backfill", 1, err)
		}
	}
	err = resolver.BackfillAndWait(ctx, st.rcfg, st.pool, st.model, job.a.Name, job.noWait, stdout, stderr)
	if errors.Is(err, context.Canceled) {
		err = errors.New("interrupted; the ids already enqueued will still be built")
	}
	if err != nil {
		return fail(stderr, "backfill", 1, err)
	}
	return 0
}

// backfillJob is one `decant backfill`: enqueue every id, wait until they
// are built, optionally with a build stage in this process (--build) and
// into a new index (--reindex).
type backfillJob struct {
	st                     *stack
	a                      *mappings.Aggregate
	reindex, build, noWait bool
	stdout, stderr         io.Writer

	wg      sync.WaitGroup // the build stage of --build
	closers []func()       // run after the build stage stopped
}

// stop cancels the build stage, waits for it, then closes its sinks.
func (j *backfillJob) stop(cancel context.CancelFunc) {
	cancel()
	j.wg.Wait()
	for _, c := range j.closers {
		c()
	}
}

// startBuild runs a build stage in this process (--build) until ctx ends.
// With --reindex it starts once the new index exists, so the sinks accept
// the changed mapping (they check the index at start).
func (j *backfillJob) startBuild(ctx context.Context) error {
	sink, closeSinks, err := newSinks(ctx, j.st)
	if err != nil {
		return err
	}
	j.closers = append(j.closers, closeSinks)
	b, err := resolver.NewBuilder(j.st.rcfg, j.st.model, j.st.pool, sink)
	if err != nil {
		return err
	}
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		defer b.Close()
		if err := b.Run(ctx); err != nil {
			j.st.log.Error("build stage stopped", "err", err)
		}
	}()
	return nil
}

// runReindex builds into a new concrete index, then swaps the alias
// (indexer.Reindex), and returns the exit status.
func (j *backfillJob) runReindex(ctx context.Context) int {
	es, err := indexer.NewClient(j.st.cfg.Elasticsearch)
	if err != nil {
		return fail(j.stderr, "backfill", 1, err)
	}
	if es == nil {
		return fail(j.stderr, "backfill", 2, errors.New("--reindex needs Elasticsearch (elasticsearch.urls is empty)"))
	}
	spec := indexer.SpecFor(j.a, false)
	err = indexer.Reindex(ctx, es, spec, indexer.ReindexOptions{Logger: j.st.log}, func(fillCtx context.Context) error {
		if j.build { // runs until the command ends, not only while filling
			if err := j.startBuild(ctx); err != nil {
				return err
			}
		}
		return resolver.BackfillAndWait(fillCtx, j.st.rcfg, j.st.pool, j.st.model, j.a.Name, false, j.stdout, j.stderr)
	})
	if err != nil {
		return fail(j.stderr, "backfill", 1, err)
	}
	fmt.Fprintf(j.stdout, "reindexed %s: alias %s now points at %s\n", j.a.Name, j.a.Index, spec.IndexName())
	return 0
}
