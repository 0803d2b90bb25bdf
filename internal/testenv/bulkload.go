package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"golang.org/x/sync/errgroup"
)

// BulkItem is one document of a direct load (BulkLoad). With a Version
// above 0 it is written as decant's sink writes: version_type
// external_gte, through an alias (require_alias).
type BulkItem struct {
	ID      string
	Source  []byte
	Version int64
}

// bulkActionBytes is about what a bulk action line adds to a document.
const bulkActionBytes = 40

// BulkLoad loads n documents (item(i) is the i-th) into index, straight
// through search, as lean as a client can be, so that the benchmarks'
// ceilings are real ones: the documents go in order, in runs of up to
// flushBytes, one _bulk request per run (item is called once per
// document); each of workers goroutines builds the body of the next run
// and sends it, so that workers requests are in
// flight; each asks only for the items' errors (filter_path), and a 429 is
// retried (RetryRejected). It fails on the first document refused.
//
// Until the thirty-sixth pass of issue 14 the loads used
// esutil.BulkIndexer, which fills one buffer per worker from a channel,
// item by item, and decodes every item of every answer: replacing the
// same 40,000 documents took it 5.9–6.2 s where this way took 4.3–4.9 s,
// as it left one of Elasticsearch's two write threads idle
// (e2e BenchmarkBulkShape; docs/performance.md, "Thirty-sixth pass").
func BulkLoad(ctx context.Context, search esapi.Transport, index string, n int, item func(i int) (BulkItem, error), flushBytes, workers int) error {
	runs := make(chan []BulkItem)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(runs)
		send := func(r []BulkItem) error {
			select {
			case runs <- r:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var run []BulkItem
		size := 0
		for i := range n {
			it, err := item(i)
			if err != nil {
				return err
			}
			k := len(it.Source) + bulkActionBytes
			if len(run) > 0 && size+k > flushBytes {
				if err := send(run); err != nil {
					return err
				}
				run, size = nil, 0
			}
			run = append(run, it)
			size += k
		}
		if len(run) > 0 {
			return send(run)
		}
		return nil
	})
	tr := RetryRejected(search)
	for range max(1, workers) {
		g.Go(func() error {
			var body []byte
			for run := range runs {
				body = body[:0]
				for _, it := range run {
					body = append(body, `{"index":{"_id":`...)
					body = appendJSONString(body, it.ID)
					if it.Version > 0 {
						body = fmt.Appendf(body, `,"version":%d,"version_type":"external_gte","require_alias":true`, it.Version)
					}
					body = append(body, "}}\n"...)
					body = append(append(body, it.Source...), '\n')
				}
				res, err := esapi.BulkRequest{Index: index, Body: bytes.NewReader(body), FilterPath: []string{"errors", "items.*.error"}}.Do(ctx, tr)
				if err != nil {
					return err
				}
				resp, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil {
					return err
				}
				if res.IsError() || !bytes.HasPrefix(resp, []byte(`{"errors":false`)) {
					return fmt.Errorf("direct bulk load into %s: %s %.500s", index, res.Status(), resp)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}
