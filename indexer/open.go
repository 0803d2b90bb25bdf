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
// Kafka client options (config.Kafka.ClientOptions). With
// indexer.bulk_load_settings a missing index is created for a bulk load
// (EnsureLoadIndex); loads lists the indexes whose load is not finished,
// for the caller to FinishLoad once the initial load has passed every
// stage. On error nothing is left open.
func OpenSinks(ctx context.Context, cfg *config.Config, aggregates []*mappings.Aggregate, kopts []kgo.Opt,
	log *slog.Logger, reg prometheus.Registerer) (ks *KafkaSink, search []*ESSink, loads []Load, err error) {
	ks, err = NewKafkaSink(KafkaSinkConfig{Kafka: kopts, TopicPrefix: cfg.Kafka.TopicPrefix,
		Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor, MinInsyncReplicas: cfg.Kafka.MinInsync(), Logger: log, Registerer: reg})
	if err != nil {
		return nil, nil, nil, err
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
		return nil, nil, nil, err
	}
	for _, e := range engines {
		aliases := map[string]string{}
		for _, a := range aggregates {
			aliases[a.Name] = a.Index
			spec := SpecFor(a, false)
			if !cfg.Indexer.BulkLoadSettings {
				if _, err := EnsureIndex(ctx, e.Client, spec); err != nil {
					closeAll()
					return nil, nil, nil, fmt.Errorf("%s: %w", e.Kind, err)
				}
				continue
			}
			index, loading, err := EnsureLoadIndex(ctx, e.Client, spec)
			if err != nil {
				closeAll()
				return nil, nil, nil, fmt.Errorf("%s: %w", e.Kind, err)
			}
			if loading {
				loads = append(loads, Load{Kind: e.Kind, Search: e.Client, Spec: spec, Index: index})
			}
		}
		s, err := NewESSink(ESSinkConfig{Client: e.Client, Kind: e.Kind, Aliases: aliases, Kafka: kopts, TopicPrefix: cfg.Kafka.TopicPrefix,
			Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor, BulkActions: cfg.Indexer.BulkActions,
			BulkBytes: cfg.Indexer.BulkBytes, MaxRequests: cfg.Indexer.BulkRequests, Logger: log, Registerer: reg})
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		search = append(search, s)
	}
	return ks, search, loads, nil
}

// Load is an index created for a bulk load that is not finished.
type Load struct {
	Kind   string // the engine
	Search Search
	Spec   IndexSpec
	Index  string // the concrete index
}
