package main

import (
	"context"
	"io"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/resolver"
)

func init() {
	register("map", "run the map stage: raw changes → refs of affected aggregates", runMap)
}

func runMap(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("map", stderr)
	configPath := configFlag(fs)
	pos, code, ok := parseFlags(fs, args)
	if !ok {
		return code
	}
	if !wantArgs(stderr, "map", pos, 0, "") {
		return 2
	}
	st, err := openStack(ctx, *configPath, "decant-map", stderr)
	if err != nil {
		return fail(stderr, "map", 1, err)
	}
	defer st.close()
	if err := mappings.RequireBeforeImages(st.model, st.cat); err != nil {
		return fail(stderr, "map", 2, err)
	}
	m, err := resolver.NewMapper(st.rcfg, st.model, st.pool)
	if err != nil {
		return fail(stderr, "map", 1, err)
	}
	defer m.Close()
	return st.runStage(ctx, "map", m.Run)
}
