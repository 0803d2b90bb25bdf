package indexer

import (
	"context"
	"fmt"

	"github.com/decant-cdc/decant/mappings"
)

// PendingReindex is an aggregate whose index is being replaced by one
// built from the current mappings, on each of Engines: the sinks write to
// both indexes until the build stage has rebuilt every document and
// SwapAlias moves the alias.
type PendingReindex struct {
	Spec    IndexSpec
	Engines []Engine
	// Resumed is true when an earlier process started it.
	Resumed bool
}

// PrepareReindexes applies mapping changes without an operator (the
// indexer.auto_reindex setting): for every aggregate whose alias points at
// an index built from other settings or mappings, it starts a reindex
// towards the current ones (StartReindex: a new concrete index, loaded
// with bulk-load settings, and the <alias>-next marker that makes the
// sinks write to both) and returns it, with the reindexes an earlier
// process started towards the current mappings and did not finish. The
// caller backfills each and swaps its alias. Aggregates whose index
// matches are not touched. Without start it changes nothing and returns
// nothing (EnsureIndex then reports each change with what to run).
func PrepareReindexes(ctx context.Context, engines []Engine, aggregates []*mappings.Aggregate, start bool, opts ReindexOptions) ([]PendingReindex, error) {
	if !start {
		return nil, nil
	}
	opts.defaults()
	var out []PendingReindex
	for _, a := range aggregates {
		spec := SpecFor(a, false)
		p := PendingReindex{Spec: spec}
		for _, e := range engines {
			want, al, err := spec.current(ctx, e.Client)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.Kind, err)
			}
			cur, next := al[spec.Alias], al[spec.NextAlias()]
			if len(cur) != 1 || cur[0] == want {
				continue // new (EnsureIndex creates it), several (EnsureIndex says so), or current
			}
			if len(next) == 1 && next[0] == want {
				p.Resumed = true
			} else {
				opts.Logger.Info("the mapping of the aggregate changed: reindexing it into a new index while the old one serves searches (indexer.auto_reindex)",
					"sink", e.Kind, "aggregate", a.Name, "alias", spec.Alias, "old", cur[0], "new", want)
				if _, err := StartReindex(ctx, e.Client, spec, opts); err != nil {
					return nil, fmt.Errorf("%s: %w", e.Kind, err)
				}
			}
			p.Engines = append(p.Engines, e)
		}
		if len(p.Engines) > 0 {
			out = append(out, p)
		}
	}
	return out, nil
}
