// Package esclient holds the HTTP transport of every Elasticsearch client
// decant makes (indexer.NewClient) and its tests' direct loads use, so
// that a ceiling measured by a test gets the same connections.
package esclient

import (
	"crypto/tls"
	"net/http"
)

// Transport keeps a connection for every bulk request in flight (http's
// default keeps 2 idle per host, so a third and fourth request would dial
// anew each time) and does not ask for gzip: bulk responses are filtered
// to a few fields per item, and compressing them costs Elasticsearch's CPU
// and decompressing them the client's. tc may be nil.
func Transport(tc *tls.Config) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	tr.DisableCompression = true
	tr.TLSClientConfig = tc
	return tr
}
