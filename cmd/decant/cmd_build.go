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

// newSinks creates the aggregate topic sink and, when Elasticsearch is
// configured, makes sure every aggregate's alias exists and creates the
// Elasticsearch sink.
func newSinks(ctx context.Context, st *stack) (resolver.Sink, func(), error) {
	cfg := st.cfg
	ks, err := indexer.NewKafkaSink(indexer.KafkaSinkConfig{Kafka: st.kopts, TopicPrefix: cfg.Kafka.TopicPrefix,
		Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor, Logger: st.log, Registerer: st.reg})
	if err != nil {
		return nil, nil, err
	}
	es, err := indexer.NewClient(cfg.Elasticsearch)
	if err != nil {
		ks.Close()
		return nil, nil, err
	}
	if es == nil { // elasticsearch.urls is empty: aggregate topics only
		return resolver.Sinks{ks}, ks.Close, nil
	}
	aliases := map[string]string{}
	for _, a := range st.model.Aggregates {
		aliases[a.Name] = a.Index
		if _, err := indexer.EnsureIndex(ctx, es, indexer.SpecFor(a, false)); err != nil {
			ks.Close()
			return nil, nil, err
		}
	}
	ess, err := indexer.NewESSink(indexer.ESSinkConfig{Client: es, Aliases: aliases, Kafka: st.kopts, TopicPrefix: cfg.Kafka.TopicPrefix,
		Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor, BulkActions: cfg.Indexer.BulkActions, Logger: st.log,
		Registerer: st.reg})
	if err != nil {
		ks.Close()
		return nil, nil, err
	}
	return resolver.Sinks{ks, ess}, func() { ess.Close(); ks.Close() }, nil
}
