package main

import (
	"context"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/resolver"
)

var runMap = register(command{name: "map", summary: "run the map stage: raw changes → refs of affected aggregates", flags: noFlags(mapStage)})

func mapStage(ctx context.Context, c *call) int {
	st, err := c.openStack(ctx)
	if err != nil {
		return c.fail(1, err)
	}
	defer st.close()
	if err := mappings.RequireBeforeImages(st.model, st.cat); err != nil {
		return c.fail(2, err)
	}
	m, err := resolver.NewMapper(st.rcfg, st.model, st.pool)
	if err != nil {
		return c.fail(1, err)
	}
	defer m.Close()
	return st.runStage(ctx, "map", "map stage stopped", m.Run)
}
