package main

import (
	"context"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/resolver"
)

var runBuild = register(command{name: "build", summary: "run the build stage: refs → documents → aggregate topics and Elasticsearch", flags: noFlags(buildStage)})

func buildStage(ctx context.Context, c *call) int {
	st, err := c.openStack(ctx)
	if err != nil {
		return c.fail(1, err)
	}
	defer st.close()
	sink, closeSinks, err := newSinks(ctx, st)
	if err != nil {
		return c.fail(1, err)
	}
	defer closeSinks()
	b, err := resolver.NewBuilder(st.rcfg, st.model, st.pool, sink)
	if err != nil {
		return c.fail(1, err)
	}
	defer b.Close()
	return st.runStage(ctx, "build", "build stage stopped", b.Run)
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
