package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/resolver"
)

func init() {
	register("backfill", "rebuild every document of an aggregate (--reindex: into a new index)", runBackfill)
}

const backfillHelp = `Usage: decant backfill <aggregate> [--reindex] [--build] [--no-wait] [--config decant.yaml]

Enqueues every root id of the aggregate into <prefix>.refs.<aggregate>
(keyset pagination, bounded memory), then waits until the build stage's
consumer group has built them all, with a progress line (count, rate, ETA)
on stderr. The documents are built by whatever build stage runs (decant run
or decant build, in any process); --build runs one in this process too.

--reindex applies a mapping change without downtime: creates the new
concrete index, makes every running sink write to both indexes, backfills,
then swaps the alias atomically and deletes the old index.

Examples:
  decant backfill customer
  decant backfill customer --build            # no decant run/build running
  decant backfill customer --reindex          # after changing its mapping
  decant backfill customer --no-wait          # enqueue only

Flags:
`

func runBackfill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("backfill", backfillHelp, stderr)
	configPath := configFlag(fs)
	reindex := fs.Bool("reindex", false, "build into a new index and swap the alias when done")
	build := fs.Bool("build", false, "run a build stage in this process while waiting")
	noWait := fs.Bool("no-wait", false, "return once the ids are enqueued")
	pos, code, ok := parseFlags(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "decant backfill: name one aggregate, e.g. decant backfill customer")
		return 2
	}
	if *reindex && *noWait {
		fmt.Fprintln(stderr, "decant backfill: --reindex waits for the documents before it swaps the alias; drop --no-wait")
		return 2
	}
	st, err := setupResolver(ctx, *configPath, "decant-backfill", stderr)
	if err != nil {
		fmt.Fprintln(stderr, "decant backfill:", err)
		return 1
	}
	defer st.close()
	a, err := findAggregate(st.model, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "decant backfill: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var closers []func() // run after the build stage stopped (defers run last-in first-out)
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// startBuild runs a build stage in this process (--build). With
	// --reindex it starts once the new index exists, so the sinks accept
	// the changed mapping (they check the index at start).
	startBuild := func() error {
		sink, closeSinks, err := newSinks(ctx, st)
		if err != nil {
			return err
		}
		closers = append(closers, closeSinks)
		b, err := resolver.NewBuilder(st.rcfg, st.model, st.pool, sink)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer b.Close()
			if err := b.Run(ctx); err != nil {
				st.log.Error("build stage stopped", "err", err)
			}
		}()
		return nil
	}
	if *build && !*reindex {
		if err := startBuild(); err != nil {
			fmt.Fprintln(stderr, "decant backfill:", err)
			return 1
		}
	}
	fill := func(ctx context.Context) error {
		if *build && *reindex {
			if err := startBuild(); err != nil {
				return err
			}
		}
		bar := newProgressLine(stderr, "enqueue "+a.Name)
		bf, err := resolver.Backfill(ctx, st.rcfg, st.pool, st.model, a.Name, resolver.BackfillOptions{Progress: bar.update})
		bar.finish()
		if err != nil {
			return err
		}
		if *noWait {
			fmt.Fprintf(stdout, "enqueued %d ids of %s\n", bf.Count, a.Name)
			return nil
		}
		bar = newProgressLine(stderr, "build "+a.Name)
		bar.hint = "no progress for 30s: is a build stage running? (decant run, decant build, or add --build)"
		err = resolver.WaitBuilt(ctx, st.rcfg, bf, bar.update)
		bar.finish()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "built %d documents of %s\n", bf.Count, a.Name)
		return nil
	}
	if *reindex {
		if len(st.cfg.Elasticsearch.URLs) == 0 {
			fmt.Fprintln(stderr, "decant backfill: --reindex needs Elasticsearch (elasticsearch.urls is empty)")
			return 2
		}
		es, err := newESClient(st.cfg)
		if err != nil {
			fmt.Fprintln(stderr, "decant backfill:", err)
			return 1
		}
		err = indexer.Reindex(ctx, es, indexer.SpecFor(a, false), indexer.ReindexOptions{Logger: st.log}, fill)
		if err != nil {
			fmt.Fprintln(stderr, "decant backfill:", err)
			return 1
		}
		fmt.Fprintf(stdout, "reindexed %s: alias %s now points at %s\n", a.Name, a.Index, indexer.SpecFor(a, false).IndexName())
		return 0
	}
	if err := fill(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "decant backfill: interrupted; the ids already enqueued will still be built")
			return 1
		}
		fmt.Fprintln(stderr, "decant backfill:", err)
		return 1
	}
	return 0
}

// progressLine redraws one line on a terminal: count, total, rate, ETA.
// Updates are throttled to 5 per second.
type progressLine struct {
	w        io.Writer
	label    string
	hint     string
	start    time.Time
	drawn    time.Time
	moved    time.Time
	last     int64
	hinted   bool
	anything bool
}

func newProgressLine(w io.Writer, label string) *progressLine {
	now := time.Now()
	return &progressLine{w: w, label: label, start: now, moved: now}
}

func (p *progressLine) update(done, total int64) {
	now := time.Now()
	if done != p.last {
		p.last, p.moved = done, now
	}
	if p.hint != "" && !p.hinted && now.Sub(p.moved) > 30*time.Second && done < total {
		fmt.Fprintf(p.w, "\n%s\n", p.hint)
		p.hinted = true
	}
	if now.Sub(p.drawn) < 200*time.Millisecond && done < total {
		return
	}
	p.drawn = now
	p.anything = true
	fmt.Fprintf(p.w, "\r%s\x1b[K", formatProgress(p.label, done, total, now.Sub(p.start)))
}

func (p *progressLine) finish() {
	if p.anything {
		fmt.Fprintln(p.w)
	}
}

// formatProgress renders "build customer  12345/100000  12%  5432/s  ETA 16s".
func formatProgress(label string, done, total int64, elapsed time.Duration) string {
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	pct, eta := "", "ETA ?"
	if total > 0 {
		pct = fmt.Sprintf("  %3d%%", min(100, done*100/total))
		if rate > 0 && done < total {
			eta = "ETA " + (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
		} else if done >= total {
			eta = "done in " + elapsed.Round(100*time.Millisecond).String()
		}
	}
	return fmt.Sprintf("%s  %d/%d%s  %.0f/s  %s", label, done, total, pct, rate, eta)
}
