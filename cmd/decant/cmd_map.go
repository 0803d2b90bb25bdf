package main

import (
	"context"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/resolver"
)

// newMapStage refuses mappings whose tables lack the before images the
// map stage needs (exit code 2), then opens the mapper.
func newMapStage(_ context.Context, st *stack) (stage, int, error) {
	if err := mappings.RequireBeforeImages(st.model, st.cat); err != nil {
		return stage{}, 2, err
	}
	m, err := resolver.NewMapper(st.rcfg, st.model, st.pool)
	if err != nil {
		return stage{}, 1, err
	}
	return stage{run: m.Run}, 0, nil
}
