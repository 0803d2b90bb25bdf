package testenv

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/opensearch-project/opensearch-go/v4"

	"github.com/decant-cdc/decant/internal/esclient"
)

// OpenSearch returns a unique index prefix on the test OpenSearch node
// (OSURL); indexes starting with it are deleted at cleanup. Its Client is
// nil: Search sends the requests.
func OpenSearch(t testing.TB) *ESEnv {
	t.Helper()
	Integration(t)
	c, err := opensearch.NewClient(opensearch.Config{Addresses: []string{OSURL()}, Transport: esclient.Transport(nil)})
	if err != nil {
		t.Fatalf("OpenSearch: %v", err)
	}
	search := osTransport{c}
	res, err := esapi.InfoRequest{}.Do(context.Background(), search)
	if err != nil {
		unavailable(t, "OpenSearch", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		unavailable(t, "OpenSearch", fmt.Errorf("GET / returned %s", res.Status()))
	}
	e := &ESEnv{Kind: "opensearch", URL: OSURL(), Prefix: "t" + Suffix(), Search: search}
	t.Cleanup(e.deleteIndexes)
	return e
}

// SearchEngine returns the test environment of a search engine kind:
// "elasticsearch" or "opensearch".
func SearchEngine(t testing.TB, kind string) *ESEnv {
	t.Helper()
	if kind == "opensearch" {
		return OpenSearch(t)
	}
	return Elasticsearch(t)
}

// osTransport sends esapi requests through opensearch-go, unbuffered.
type osTransport struct{ c *opensearch.Client }

func (o osTransport) Perform(req *http.Request) (*http.Response, error) { return o.c.Stream(req) }
