package main

import (
	"context"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/resolver"
)

// newBuildStage opens the sinks the config asks for (indexer.OpenSinks:
// the aggregate topics, and Elasticsearch and OpenSearch when their urls
// are set) and the builder that writes to them; closing the stage closes
// the sinks.
func newBuildStage(ctx context.Context, st *stack) (stage, int, error) {
	ks, search, err := indexer.OpenSinks(ctx, st.cfg, st.model.Aggregates, st.kopts, st.log, st.reg)
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
	b, err := resolver.NewBuilder(st.rcfg, st.model, st.pool, sink)
	if err != nil {
		closeSinks()
		return stage{}, 1, err
	}
	return stage{b.Run, closeSinks}, 0, nil
}
