package indexer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esapi"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/internal/esclient"
	"github.com/decant-cdc/decant/mappings"
)

// Search is a search engine's HTTP client: Elasticsearch's
// (*elasticsearch.Client, which checks that the server is Elasticsearch)
// or OpenSearch's (NewOpenSearchClient). Every request decant sends
// (esapi requests: bulk, index and alias management, refresh, count) is the
// same for both engines.
type Search interface {
	Perform(*http.Request) (*http.Response, error)
}

// NewClient builds the Elasticsearch client the elasticsearch section asks
// for (URLs, credentials, TLS), or returns nil when no URL is configured:
// the search sink is off. It does no I/O; Ping checks the server.
func NewClient(cfg config.Elasticsearch) (Search, error) {
	if len(cfg.URLs) == 0 {
		return nil, nil
	}
	tc, err := cfg.TLS.ClientConfig("elasticsearch")
	if err != nil {
		return nil, err
	}
	ec := elasticsearch.Config{Addresses: cfg.URLs, Username: cfg.Username, Password: cfg.Password, APIKey: cfg.APIKey}
	ec.Transport = esclient.Transport(tc)
	es, err := elasticsearch.NewClient(ec)
	if err != nil {
		return nil, fmt.Errorf("elasticsearch: %w", err)
	}
	return es, nil
}

// Refresher returns a function that refreshes the alias of every
// aggregate so the documents written are searchable, or nil when es is nil.
func Refresher(es Search, aggregates []*mappings.Aggregate) func(context.Context) error {
	if es == nil {
		return nil
	}
	var aliases []string
	for _, a := range aggregates {
		aliases = append(aliases, a.Index)
	}
	return func(ctx context.Context) error {
		res, err := esapi.IndicesRefreshRequest{Index: aliases, AllowNoIndices: esapi.BoolPtr(true), IgnoreUnavailable: esapi.BoolPtr(true)}.Do(ctx, es)
		if err != nil {
			return fmt.Errorf("refresh %v: %w", aliases, err)
		}
		defer res.Body.Close()
		if res.IsError() {
			return fmt.Errorf("refresh %v: %s", aliases, res.Status())
		}
		return nil
	}
}

// CountDocuments returns how many documents alias holds. ok is false when
// Elasticsearch could not be asked.
func CountDocuments(ctx context.Context, es Search, alias string) (n int64, ok bool) {
	res, err := esapi.CountRequest{Index: []string{alias}}.Do(ctx, es)
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	var c struct{ Count int64 }
	_ = json.NewDecoder(res.Body).Decode(&c)
	return c.Count, true
}
