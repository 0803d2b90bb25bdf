package main

import (
	"context"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/resolver"
)

// newBuildStage opens the sinks the config asks for (indexer.OpenSinks:
// the aggregate topics, and Elasticsearch unless elasticsearch.urls is
// empty) and the builder that writes to them; closing the stage closes
// the sinks.
func newBuildStage(ctx context.Context, st *stack) (stage, int, error) {
	ks, es, err := indexer.OpenSinks(ctx, st.cfg, st.model.Aggregates, st.kopts, st.log, st.reg)
	if err != nil {
		return stage{}, 1, err
	}
	sink, closeSinks := resolver.Sinks{ks}, ks.Close
	if es != nil {
		sink, closeSinks = resolver.Sinks{ks, es}, func() { es.Close(); ks.Close() }
	}
	b, err := resolver.NewBuilder(st.rcfg, st.model, st.pool, sink)
	if err != nil {
		closeSinks()
		return stage{}, 1, err
	}
	return stage{b.Run, closeSinks}, 0, nil
}
