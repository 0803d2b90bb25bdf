package resolver

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/mappings"
)

// FirstStartBackfill decides, before the streamer starts, whether `decant
// run` must backfill aggregates that have no documents yet. A slot that
// does not exist yet is created with an initial snapshot, whose rows make
// the map stage rebuild every document, so no backfill is needed then;
// with an existing slot, or without snapshots (snapshotMode "never"),
// aggregates with no documents are backfilled.
func FirstStartBackfill(ctx context.Context, db *pgxpool.Pool, slot, snapshotMode string) (bool, error) {
	if snapshotMode == "never" {
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
