package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/resolver"
)

// backfillFlags adds the flags of backfill and returns its body.
func backfillFlags(fs *flag.FlagSet) func(context.Context, *call) int {
	job := &backfillJob{}
	fs.BoolVar(&job.reindex, "reindex", false, "build into a new index and swap the alias when done")
	fs.BoolVar(&job.build, "build", false, "run a build stage in this process while waiting")
	fs.BoolVar(&job.noWait, "no-wait", false, "return once the ids are enqueued")
	return job.run
}

func (j *backfillJob) run(ctx context.Context, c *call) int {
	if j.reindex && j.noWait {
		return c.fail(2, errors.New("--reindex waits for the documents before it swaps the alias; drop --no-wait"))
	}
	st, err := c.openStack(ctx)
	if err != nil {
		return c.fail(1, err)
	}
	defer st.close()
	if j.a, err = st.model.FindAggregate(c.args[0]); err != nil {
		return c.fail(1, err)
	}
	j.st, j.call = st, c
	ctx, cancel := context.WithCancel(ctx)
	defer func() { // stops the --build stage, waits for it, closes its sinks
		cancel()
		if j.stopBuild != nil {
			j.stopBuild()
		}
	}()
	if j.reindex {
		return j.runReindex(ctx)
	}
	if j.build {
		if err := j.startBuild(ctx); err != nil {
			return c.fail(1, err)
		}
	}
	err = resolver.BackfillAndWait(ctx, st.rcfg, st.pool, st.model, j.a.Name, j.noWait, c.stdout, c.stderr)
	if errors.Is(err, context.Canceled) {
		err = errors.New("interrupted; the ids already enqueued will still be built")
	}
	if err != nil {
		return c.fail(1, err)
	}
	return 0
}

// backfillJob is one `decant backfill`: enqueue every id, wait until they
// are built, optionally with a build stage in this process (--build) and
// into a new index (--reindex).
type backfillJob struct {
	*call
	st                     *stack
	a                      *mappings.Aggregate
	reindex, build, noWait bool
	stopBuild              func() // waits for the --build stage, then closes its sinks
}

// startBuild runs a build stage in this process (--build) until ctx ends.
// With --reindex it starts once the new index exists, so the sinks accept
// the changed mapping (they check the index at start).
func (j *backfillJob) startBuild(ctx context.Context) error {
	// This command does the reindexing it is asked for, no other.
	j.st.cfg.Indexer.AutoReindex = false
	b, _, err := newBuildStage(ctx, j.st)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.run(ctx); err != nil {
			j.st.log.Error("build stage stopped", "err", err)
		}
	}()
	j.stopBuild = func() { <-done; b.close() }
	return nil
}

// runReindex builds into a new concrete index, then swaps the alias
// (indexer.Reindex), and returns the exit status.
func (j *backfillJob) runReindex(ctx context.Context) int {
	engines, err := indexer.Engines(j.st.cfg)
	if err != nil {
		return j.fail(1, err)
	}
	if len(engines) == 0 {
		return j.fail(2, errors.New("--reindex needs a search engine (elasticsearch.urls and opensearch.urls are empty)"))
	}
	spec := indexer.SpecFor(j.a, false)
	err = indexer.ReindexAll(ctx, engines, spec, indexer.ReindexOptions{Logger: j.st.log}, func(fillCtx context.Context) error {
		if j.build { // runs until the command ends, not only while filling
			if err := j.startBuild(ctx); err != nil {
				return err
			}
		}
		return resolver.BackfillAndWait(fillCtx, j.st.rcfg, j.st.pool, j.st.model, j.a.Name, false, j.stdout, j.stderr)
	})
	if err != nil {
		return j.fail(1, err)
	}
	fmt.Fprintf(j.stdout, "reindexed %s: alias %s now points at %s\n", j.a.Name, j.a.Index, spec.IndexName())
	return 0
}
