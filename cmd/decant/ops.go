package main

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"net/http"
	"strings"
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
	return newESClient(cfg)
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
	wc := watermark.Config{Slot: cfg.Postgres.Slot, TopicPrefix: cfg.Kafka.TopicPrefix, Group: resolverGroup(cfg),
		Snapshot: cfg.Streamer.SnapshotMode != "never"}
	for _, t := range model.Tables() {
		wc.RawTopics = append(wc.RawTopics, streamer.RawTopic(cfg.Kafka.TopicPrefix, t.Schema, t.Name))
	}
	for _, a := range model.Aggregates {
		wc.Aggregates = append(wc.Aggregates, a.Name)
	}
	kopts, _ := kafkaOpts(cfg) // already validated by the caller's kafkaAdmin
	return watermark.New(wc, db, adm, kopts)
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

// newRegistry is the metrics registry of one process: Go and process
// collectors, plus the slot lag read at scrape time, so any decant process
// (not only the streamer) reports it.
func newRegistry(cfg *config.Config, db *pgxpool.Pool) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "decant_slot_lag_bytes",
		Help: "pg_current_wal_lsn() minus the slot's confirmed_flush_lsn, read at scrape time (-1 when unknown)."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var lag *int64
			if err := db.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::int8 FROM pg_replication_slots WHERE slot_name = $1`, cfg.Postgres.Slot).Scan(&lag); err != nil || lag == nil {
				return -1
			}
			return float64(*lag)
		}))
	return reg
}

// startOps serves the HTTP port of a single-stage process in the
// background; stop shuts it down. A failure to listen is logged, not fatal.
func (st *resolverSetup) startOps(ctx context.Context) (*opsServer, func()) {
	ctx, cancel := context.WithCancel(ctx)
	var tracker *watermark.Tracker
	if cl, adm, err := kafkaAdmin(ctx, st.cfg); err == nil {
		tracker = newTracker(st.cfg, st.model, st.pool, adm)
		go func() { <-ctx.Done(); cl.Close() }()
	}
	es, _ := esClientFromConfig(st.cfg)
	ops := newOpsServer(st.log, tracker, esRefresher(es, st.model), st.reg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ops.serve(ctx, st.cfg.HTTP.Listen); err != nil {
			st.log.Warn("http server not started", "err", err)
		}
	}()
	return ops, func() { cancel(); <-done }
}

// requireBeforeImages refuses to start the map stage when a table's before
// image lacks link columns the resolution needs (PRODUCT.md §4): without
// them, documents a row used to belong to would never be rebuilt.
func requireBeforeImages(model *mappings.Model, cat *mappings.Catalog) error {
	var problems []string
	for _, tn := range model.Tables() {
		need := model.NeedsBeforeImage(tn)
		if len(need) == 0 {
			continue
		}
		t := cat.Table(tn)
		if t == nil {
			continue
		}
		have := map[string]bool{}
		for _, c := range t.IdentityColumns {
			have[c] = true
		}
		var missing []string
		for _, c := range need {
			if !have[c] {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("  table %s: updates and deletes do not carry %v in their before image; fix: ALTER TABLE %s REPLICA IDENTITY FULL;",
				tn, missing, tn.Sanitize()))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("the map stage cannot find the documents a changed row used to belong to:\n%s\n(decant check lists every problem)", strings.Join(problems, "\n"))
}

// findAggregate looks an aggregate up by name; the error lists the names the
// mappings define.
func findAggregate(model *mappings.Model, name string) (*mappings.Aggregate, error) {
	if a := model.Aggregate(name); a != nil {
		return a, nil
	}
	var names []string
	for _, x := range model.Aggregates {
		names = append(names, x.Name)
	}
	return nil, fmt.Errorf("no aggregate %q; the mappings define: %s", name, strings.Join(names, ", "))
}
