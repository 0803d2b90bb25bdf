package main

import (
	"context"
	"io"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/resolver"
)

func init() {
	register("build", "run the build stage: refs → documents → aggregate topics and Elasticsearch", runBuild)
}

func runBuild(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("build", stderr)
	configPath := configFlag(fs)
	pos, code, ok := parseFlags(fs, args)
	if !ok {
		return code
	}
	if !wantArgs(stderr, "build", pos, 0, "") {
		return 2
	}
	st, err := openStack(ctx, *configPath, "decant-build", stderr)
	if err != nil {
		return fail(stderr, "build", 1, err)
	}
	defer st.close()
	sink, closeSinks, err := newSinks(ctx, st)
	if err != nil {
		return fail(stderr, "build", 1, err)
	}
	defer closeSinks()
	b, err := resolver.NewBuilder(st.rcfg, st.model, st.pool, sink)
	if err != nil {
		return fail(stderr, "build", 1, err)
	}
	defer b.Close()
	return st.runStage(ctx, "build", b.Run)
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
