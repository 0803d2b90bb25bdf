package testenv

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"

	"github.com/decant-cdc/decant/internal/ctxtime"
)

// RetryRejected wraps next so that a request Elasticsearch (or
// OpenSearch) rejects with 429 Too Many Requests is sent again after a
// backoff (50 ms, doubling, 8 retries), as Elasticsearch asks bulk clients
// to do. The benchmarks' direct loads, their ceilings, use it: with 8
// requests of 10 MB in flight a load can pass the node's indexing
// pressure limit (10% of a 512 MB heap) at any moment, and a ceiling that
// failed on the first rejection was not a ceiling. The retries' time is
// part of the load's.
func RetryRejected(next esapi.Transport) esapi.Transport { return retryRejected{next} }

type retryRejected struct{ next esapi.Transport }

func (t retryRejected) Perform(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
	}
	for attempt := 0; ; attempt++ {
		if body != nil {
			req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		res, err := t.next.Perform(req)
		if err != nil || res.StatusCode != http.StatusTooManyRequests || attempt == 8 {
			return res, err
		}
		io.Copy(io.Discard, res.Body) //nolint:errcheck // drained to reuse the connection
		res.Body.Close()
		if !ctxtime.Sleep(req.Context(), 50*time.Millisecond<<attempt) {
			return nil, req.Context().Err()
		}
	}
}
