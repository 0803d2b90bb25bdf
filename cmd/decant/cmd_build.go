package main

import (
	"context"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/resolver"
)

// newBuildStage opens the sinks and the builder that writes to them.
func newBuildStage(ctx context.Context, st *stack) (stage, int, error) {
	sink, closeSinks, err := newSinks(ctx, st)
	if err != nil {
		return nil, 1, err
	}
	b, err := resolver.NewBuilder(st.rcfg, st.model, st.pool, sink)
	if err != nil {
		closeSinks()
		return nil, 1, err
	}
	return buildStage{b, closeSinks}, 0, nil
}

// buildStage is the builder and the sinks it writes to, closed after it.
type buildStage struct {
	*resolver.Builder
	closeSinks func()
}

func (b buildStage) Close() {
	b.Builder.Close()
	b.closeSinks()
}

// newSinks creates the sinks the config asks for (indexer.OpenSinks) as
// the build stage's Sink.
func newSinks(ctx context.Context, st *stack) (resolver.Sink, func(), error) {
	ks, es, err := indexer.OpenSinks(ctx, st.cfg, st.model.Aggregates, st.kopts, st.log, st.reg)
	if err != nil {
		return nil, nil, err
	}
	if es == nil { // elasticsearch.urls is empty: aggregate topics only
		return resolver.Sinks{ks}, ks.Close, nil
	}
	return resolver.Sinks{ks, es}, func() { es.Close(); ks.Close() }, nil
}
