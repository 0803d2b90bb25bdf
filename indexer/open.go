package indexer

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/mappings"
)

// OpenSinks creates the sinks decant.yaml asks for: the aggregate topic
// sink, and one search sink per configured engine (Engines:
// Elasticsearch, OpenSearch; none when their urls are empty), after making
// sure every aggregate's alias exists on it (EnsureIndex). kopts are the
// Kafka client options (config.Kafka.ClientOptions). On error nothing is
// left open.
func OpenSinks(ctx context.Context, cfg *config.Config, aggregates []*mappings.Aggregate, kopts []kgo.Opt,
	log *slog.Logger, reg prometheus.Registerer) (ks *KafkaSink, search []*ESSink, err error) {
	ks, err = NewKafkaSink(KafkaSinkConfig{Kafka: kopts, TopicPrefix: cfg.Kafka.TopicPrefix,
		Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor, MinInsyncReplicas: cfg.Kafka.MinInsync(), Logger: log, Registerer: reg})
	if err != nil {
		return nil, nil, err
	}
	closeAll := func() {
		for _, s := range search {
			s.Close()
		}
		ks.Close()
	}
	engines, err := Engines(cfg)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	for _, e := range engines {
		aliases := map[string]string{}
		for _, a := range aggregates {
			aliases[a.Name] = a.Index
			if _, err := EnsureIndex(ctx, e.Client, SpecFor(a, false)); err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("%s: %w", e.Kind, err)
			}
		}
		s, err := NewESSink(ESSinkConfig{Client: e.Client, Kind: e.Kind, Aliases: aliases, Kafka: kopts, TopicPrefix: cfg.Kafka.TopicPrefix,
			Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor, BulkActions: cfg.Indexer.BulkActions,
			Logger: log, Registerer: reg})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		search = append(search, s)
	}
	return ks, search, nil
}
