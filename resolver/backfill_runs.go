package resolver

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/mappings"
)

// Backfills are run two ways: by `decant run` on first start
// (FirstStartBackfill, BackfillEmpty), and on demand by `decant backfill`
// (BackfillAndWait), which draws its progress on a terminal.

// FirstStartBackfill decides, before the streamer starts, whether `decant
// run` must backfill aggregates that have no documents yet. A slot that
// does not exist yet is created with an initial snapshot, whose rows make
// the map stage rebuild every document, so no backfill is needed then;
// with an existing slot, or without snapshots (streamer.snapshot_mode
// never), aggregates with no documents are backfilled.
func FirstStartBackfill(ctx context.Context, db *pgxpool.Pool, slot string, snapshots bool) (bool, error) {
	if !snapshots {
		return true, nil
	}
	var slotExists bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&slotExists)
	return slotExists, err
}

// BackfillEmpty builds every document of each aggregate that has none yet
// (NeedsBackfill), through the refs topic like any other build. It logs
// to cfg.Logger instead of failing: an aggregate it cannot backfill is
// left for `decant backfill`. It returns once every backfill is enqueued.
func BackfillEmpty(ctx context.Context, cfg Config, db *pgxpool.Pool, model *mappings.Model) {
	cfg.defaults()
	log := cfg.Logger
	for _, a := range model.Aggregates {
		need, err := NeedsBackfill(ctx, cfg, a.Name)
		if err != nil {
			log.Warn("cannot tell whether the aggregate needs a backfill; run 'decant backfill' if documents are missing", "aggregate", a.Name, "err", err)
			continue
		}
		if !need {
			continue
		}
		started := time.Now()
		log.Info("first start of aggregate: backfilling every document", "aggregate", a.Name)
		last := time.Now()
		b, err := Backfill(ctx, cfg, db, model, a.Name, BackfillOptions{Progress: func(done, total int64) {
			if time.Since(last) > 5*time.Second {
				log.Info("backfill progress", "aggregate", a.Name, "enqueued", done, "total", total)
				last = time.Now()
			}
		}})
		if err != nil {
			if ctx.Err() == nil {
				log.Error("backfill failed; run 'decant backfill "+a.Name+"' to retry", "aggregate", a.Name, "err", err)
			}
			continue
		}
		log.Info("backfill enqueued", "aggregate", a.Name, "ids", b.Count, "took", time.Since(started).Round(time.Millisecond))
	}
}

// BackfillAndWait is `decant backfill` without the build stage: it
// enqueues every id of aggregate (Backfill), then, unless noWait, waits
// until the build stage has built them (WaitBuilt). It draws a progress
// line (count, rate, ETA) on term and writes what it did to out.
func BackfillAndWait(ctx context.Context, cfg Config, db *pgxpool.Pool, model *mappings.Model, aggregate string, noWait bool, out, term io.Writer) error {
	bar := newProgressLine(term, "enqueue "+aggregate)
	bf, err := Backfill(ctx, cfg, db, model, aggregate, BackfillOptions{Progress: bar.update})
	bar.finish()
	if err != nil {
		return err
	}
	if noWait {
		fmt.Fprintf(out, "enqueued %d ids of %s\n", bf.Count, aggregate)
		return nil
	}
	bar = newProgressLine(term, "build "+aggregate)
	bar.hint = "no progress for 30s: is a build stage running? (decant run, decant build, or add --build)"
	err = WaitBuilt(ctx, cfg, bf, bar.update)
	bar.finish()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "built %d documents of %s\n", bf.Count, aggregate)
	return nil
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
