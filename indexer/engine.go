package indexer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/opensearch-project/opensearch-go/v4"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/internal/esclient"
	"github.com/decant-cdc/decant/mappings"
)

// The search engines decant writes to: the config sections, the sinks'
// names (metrics' sink label, dead letters).
const (
	KindElasticsearch = "elasticsearch"
	KindOpenSearch    = "opensearch"
)

// Engine is one configured search engine.
type Engine struct {
	Kind   string   // KindElasticsearch or KindOpenSearch
	URLs   []string // for messages: passwords redacted
	Client Search
}

// Engines returns the search engines the config asks for, Elasticsearch
// first; none when both url lists are empty. It does no I/O: Check asks
// each engine what it is.
func Engines(cfg *config.Config) ([]Engine, error) {
	var out []Engine
	es, err := NewClient(cfg.Elasticsearch)
	if err != nil {
		return nil, err
	}
	if es != nil {
		out = append(out, Engine{Kind: KindElasticsearch, URLs: config.RedactURLs(cfg.Elasticsearch.URLs), Client: es})
	}
	osc, err := NewOpenSearchClient(cfg.OpenSearch)
	if err != nil {
		return nil, err
	}
	if osc != nil {
		out = append(out, Engine{Kind: KindOpenSearch, URLs: config.RedactURLs(cfg.OpenSearch.URLs), Client: osc})
	}
	return out, nil
}

// NewOpenSearchClient builds the OpenSearch client the opensearch section
// asks for (URLs, credentials, TLS), or returns nil when no URL is
// configured. It does no I/O.
func NewOpenSearchClient(cfg config.Elasticsearch) (Search, error) {
	if len(cfg.URLs) == 0 {
		return nil, nil
	}
	tc, err := cfg.TLS.ClientConfig("opensearch")
	if err != nil {
		return nil, err
	}
	c, err := opensearch.NewClient(opensearch.Config{Addresses: cfg.URLs, Username: cfg.Username, Password: cfg.Password,
		Transport: esclient.Transport(tc)})
	if err != nil {
		return nil, fmt.Errorf("opensearch: %w", err)
	}
	return openSearchClient{c}, nil
}

// openSearchClient sends esapi requests through opensearch-go: its
// Stream returns the response unbuffered, as esapi expects.
type openSearchClient struct{ c *opensearch.Client }

func (o openSearchClient) Perform(req *http.Request) (*http.Response, error) { return o.c.Stream(req) }

// ServerInfo is what a search engine says about itself (GET /).
type ServerInfo struct {
	Kind    string // KindElasticsearch or KindOpenSearch
	Version string // e.g. 7.17.29, 2.19.6
	Major   int
}

// Supported search engine versions: tested here (Elasticsearch 7.17,
// OpenSearch 2.19 and 3.x), or relied on by API contract only
// (Elasticsearch 8 and 9, OpenSearch 1), see docs/operations.md.
func supported(kind string, major int) bool {
	switch kind {
	case KindElasticsearch:
		return major >= 7 && major <= 9
	case KindOpenSearch:
		return major >= 1 && major <= 3
	}
	return false
}

// Tested says whether decant's tests run against this engine version:
// Elasticsearch 7.17, OpenSearch 2.19 and 3.x.
func Tested(info ServerInfo) bool {
	switch info.Kind {
	case KindElasticsearch:
		return strings.HasPrefix(info.Version, "7.17.")
	case KindOpenSearch:
		return strings.HasPrefix(info.Version, "2.19.") || info.Major == 3
	}
	return false
}

// Check fails unless the engine answers within 10 seconds as the kind it
// is configured as, in a supported version; the error says which setting
// to check. It returns what the server said.
func (e Engine) Check(ctx context.Context) (ServerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := esapi.InfoRequest{}.Do(ctx, e.Client)
	if err != nil {
		if e.Kind == KindElasticsearch && strings.Contains(err.Error(), "not Elasticsearch") {
			return ServerInfo{}, fmt.Errorf("elasticsearch.urls %v: the server is not Elasticsearch (%v); an OpenSearch cluster goes under opensearch.urls", e.URLs, err)
		}
		hint := config.TLSHint(e.Kind, e.Kind+".urls", err)
		if hint == "" {
			hint = fmt.Sprintf("check %s.urls", e.Kind)
		} else if strings.Contains(hint, "does not speak TLS") {
			hint += ", or http:// if it has none"
		}
		return ServerInfo{}, fmt.Errorf("%s at %v is not reachable: %w (%s)", e.Kind, e.URLs, err, hint)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden {
		return ServerInfo{}, fmt.Errorf("%s at %v refused the credentials (%s): check %s.username/password%s", e.Kind, e.URLs, res.Status(), e.Kind,
			map[bool]string{true: " or api_key"}[e.Kind == KindElasticsearch])
	}
	if res.IsError() {
		return ServerInfo{}, fmt.Errorf("%s at %v answered %s", e.Kind, e.URLs, res.Status())
	}
	var body struct {
		Version struct {
			Number       string `json:"number"`
			Distribution string `json:"distribution"`
		} `json:"version"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return ServerInfo{}, fmt.Errorf("%s at %v: unreadable answer to GET /: %w", e.Kind, e.URLs, err)
	}
	info := ServerInfo{Kind: KindElasticsearch, Version: body.Version.Number}
	if body.Version.Distribution == "opensearch" {
		info.Kind = KindOpenSearch
	}
	info.Major, _ = strconv.Atoi(strings.SplitN(info.Version, ".", 2)[0])
	if info.Kind != e.Kind {
		return info, fmt.Errorf("%s.urls %v: the server is %s %s; configure it under %s.urls", e.Kind, e.URLs, info.Kind, info.Version, info.Kind)
	}
	if !supported(info.Kind, info.Major) {
		return info, fmt.Errorf("%s at %v is version %s, which decant does not support (Elasticsearch 7–9, OpenSearch 1–3)", e.Kind, e.URLs, info.Version)
	}
	return info, nil
}

// CheckAll checks every engine (Check) and returns the first error.
func CheckAll(ctx context.Context, engines []Engine) error {
	var errs []error
	for _, e := range engines {
		if _, err := e.Check(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Refreshers returns a function that refreshes the alias of every
// aggregate on every engine, so the documents written are searchable, or
// nil when there is no engine.
func Refreshers(engines []Engine, aggregates []*mappings.Aggregate) func(context.Context) error {
	if len(engines) == 0 {
		return nil
	}
	var fns []func(context.Context) error
	for _, e := range engines {
		fns = append(fns, Refresher(e.Client, aggregates))
	}
	return func(ctx context.Context) error {
		var errs []error
		for _, f := range fns {
			if err := f(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}
