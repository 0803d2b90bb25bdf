package indexer

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/mappings"
)

// OpenSinks creates the sinks decant.yaml asks for: the aggregate topic
// sink, and, when elasticsearch.urls is not empty, the Elasticsearch sink
// after making sure every aggregate's alias exists (EnsureIndex); es is
// nil otherwise. kopts are the Kafka client options
// (config.Kafka.ClientOptions). On error nothing is left open.
func OpenSinks(ctx context.Context, cfg *config.Config, aggregates []*mappings.Aggregate, kopts []kgo.Opt,
	log *slog.Logger, reg prometheus.Registerer) (ks *KafkaSink, es *ESSink, err error) {
	ks, err = NewKafkaSink(KafkaSinkConfig{Kafka: kopts, TopicPrefix: cfg.Kafka.TopicPrefix,
		Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor, MinInsyncReplicas: cfg.Kafka.MinInsync(), Logger: log, Registerer: reg})
	if err != nil {
		return nil, nil, err
	}
	client, err := NewClient(cfg.Elasticsearch)
	if err != nil {
		ks.Close()
		return nil, nil, err
	}
	if client == nil {
		return ks, nil, nil
	}
	aliases := map[string]string{}
	for _, a := range aggregates {
		aliases[a.Name] = a.Index
		if _, err := EnsureIndex(ctx, client, SpecFor(a, false)); err != nil {
			ks.Close()
			return nil, nil, err
		}
	}
	es, err = NewESSink(ESSinkConfig{Client: client, Aliases: aliases, Kafka: kopts, TopicPrefix: cfg.Kafka.TopicPrefix,
		Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor, BulkActions: cfg.Indexer.BulkActions,
		Logger: log, Registerer: reg})
	if err != nil {
		ks.Close()
		return nil, nil, err
	}
	return ks, es, nil
}
