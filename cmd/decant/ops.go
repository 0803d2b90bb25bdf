package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/streamer"
	"github.com/decant-cdc/decant/watermark"
)

// esClientFromConfig builds the Elasticsearch client, or nil when no URL is configured.
func esClientFromConfig(cfg *config.Config) (*elasticsearch.Client, error) {
	if len(cfg.Elasticsearch.URLs) == 0 {
		return nil, nil
	}
	tc, err := tlsConfig("elasticsearch", cfg.Elasticsearch.TLS)
	if err != nil {
		return nil, err
	}
	ec := elasticsearch.Config{Addresses: cfg.Elasticsearch.URLs, Username: cfg.Elasticsearch.Username,
		Password: cfg.Elasticsearch.Password, APIKey: cfg.Elasticsearch.APIKey, MaxRetries: 3}
	if tc != nil {
		ec.Transport = &http.Transport{TLSClientConfig: tc}
	}
	es, err := elasticsearch.NewClient(ec)
	if err != nil {
		return nil, fmt.Errorf("elasticsearch: %w", err)
	}
	return es, nil
}

// checkES fails unless Elasticsearch answers with 200.
func checkES(ctx context.Context, es *elasticsearch.Client, cfg *config.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := esapi.InfoRequest{}.Do(ctx, es)
	if err != nil {
		return fmt.Errorf("elasticsearch at %v is not reachable: %w (check elasticsearch.urls)", cfg.Elasticsearch.URLs, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden {
		return fmt.Errorf("elasticsearch at %v refused the credentials (%s): check elasticsearch.username/password or api_key", cfg.Elasticsearch.URLs, res.Status())
	}
	if res.IsError() {
		return fmt.Errorf("elasticsearch at %v answered %s", cfg.Elasticsearch.URLs, res.Status())
	}
	return nil
}

// kafkaAdmin connects to Kafka and checks that a broker answers.
func kafkaAdmin(ctx context.Context, cfg *config.Config) (*kgo.Client, *kadm.Client, error) {
	opts, err := kafkaOpts(cfg)
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: %w", err)
	}
	adm := kadm.NewClient(cl)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := adm.BrokerMetadata(cctx); err != nil {
		cl.Close()
		return nil, nil, fmt.Errorf("kafka at %v is not reachable: %w (check kafka.brokers, kafka.tls, kafka.sasl)", cfg.Kafka.Brokers, err)
	}
	return cl, adm, nil
}

// newTracker builds the watermark tracker of a model.
func newTracker(cfg *config.Config, model *mappings.Model, db *pgxpool.Pool, adm *kadm.Client) *watermark.Tracker {
	wc := watermark.Config{Slot: cfg.Postgres.Slot, TopicPrefix: cfg.Kafka.TopicPrefix, Group: resolverGroup(cfg)}
	for _, t := range model.Tables() {
		wc.RawTopics = append(wc.RawTopics, streamer.RawTopic(cfg.Kafka.TopicPrefix, t.Schema, t.Name))
	}
	for _, a := range model.Aggregates {
		wc.Aggregates = append(wc.Aggregates, a.Name)
	}
	return watermark.New(wc, db, adm)
}

// resolverGroup is the consumer group prefix of the map and build stages.
func resolverGroup(cfg *config.Config) string {
	if cfg.Resolver.Group != "" {
		return cfg.Resolver.Group
	}
	return cfg.Kafka.TopicPrefix
}

// esRefresher refreshes every aggregate's alias so written documents are searchable.
func esRefresher(es *elasticsearch.Client, model *mappings.Model) func(context.Context) error {
	if es == nil {
		return nil
	}
	var aliases []string
	for _, a := range model.Aggregates {
		aliases = append(aliases, a.Index)
	}
	return func(ctx context.Context) error {
		res, err := esapi.IndicesRefreshRequest{Index: aliases, AllowNoIndices: esapi.BoolPtr(true), IgnoreUnavailable: esapi.BoolPtr(true)}.Do(ctx, es)
		if err != nil {
			return fmt.Errorf("elasticsearch refresh: %w", err)
		}
		defer res.Body.Close()
		if res.IsError() {
			return fmt.Errorf("elasticsearch refresh: %s", res.Status())
		}
		return nil
	}
}
