package indexer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/wire"
)

// TestESSinkBoundsRequestsInFlight: however many Writes run at once (the
// build stage keeps several batches in flight, each writing in parallel),
// at most MaxRequests bulk requests reach Elasticsearch at a time, and
// every Write still succeeds. The server is a stand-in that only counts
// concurrent _bulk requests; the sink's behaviour against a real
// Elasticsearch is covered by the e2e suites.
func TestESSinkBoundsRequestsInFlight(t *testing.T) {
	for _, limit := range []int{1, 3} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var now, peak atomic.Int32
			s := stubESSink(t, ESSinkConfig{MaxRequests: limit}, func(w http.ResponseWriter, r *http.Request) {
				n := now.Add(1)
				defer now.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(50 * time.Millisecond)
				var body bytes.Buffer
				_, _ = body.ReadFrom(r.Body)
				actions := bytes.Count(body.Bytes(), []byte("\n")) / 2
				items := make([]string, actions)
				for i := range items {
					items[i] = `{"index":{"_index":"idx","status":201,"result":"created"}}`
				}
				fmt.Fprintf(w, `{"errors":false,"items":[%s]}`, strings.Join(items, ","))
			})
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d := wire.Document{Aggregate: "doc", ID: json.RawMessage(fmt.Sprintf(`{"id":%d}`, i)), Version: 1, Doc: json.RawMessage(`{"a":1}`)}
					errs <- s.Write(context.Background(), []wire.Document{d})
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if got := peak.Load(); got != int32(limit) {
				t.Errorf("%d bulk requests were in flight at once, want at most and, with 8 concurrent writes, exactly MaxRequests = %d", got, limit)
			}
			if got := s.Stats().Written; got != 8 {
				t.Errorf("%d documents written, want 8", got)
			}
		})
	}
}

// TestESSinkCountsSupersededAfterRetry: a Write sends one action per _id
// (the newer version of a duplicate, in the place of the first), and when
// a retry round resent only some of them, the superseded duplicate is
// still counted against the action kept for its _id (a conflict), not
// against whichever action the retry left at that position (that read
// past the end of the retried actions and panicked).
func TestESSinkCountsSupersededAfterRetry(t *testing.T) {
	var (
		mu       sync.Mutex
		requests [][]string // the _ids of each bulk request, in order
		refused  = map[string]bool{"9": true}
	)
	s := stubESSink(t, ESSinkConfig{RetryBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		lines := strings.Split(strings.TrimSuffix(body.String(), "\n"), "\n")
		var ids, items []string
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < len(lines); i += 2 {
			var a map[string]struct {
				ID string `json:"_id"`
			}
			if err := json.Unmarshal([]byte(lines[i]), &a); err != nil {
				t.Errorf("action line %q: %v", lines[i], err)
			}
			id := a["index"].ID
			ids = append(ids, id)
			if refused[id] {
				delete(refused, id) // once
				items = append(items, `{"index":{"_index":"idx","status":429,"error":{"type":"es_rejected_execution_exception","reason":"queue full"}}}`)
				continue
			}
			items = append(items, `{"index":{"_index":"idx","status":201,"result":"created"}}`)
		}
		requests = append(requests, ids)
		fmt.Fprintf(w, `{"errors":true,"items":[%s]}`, strings.Join(items, ","))
	})
	doc := func(id int, v uint64) wire.Document {
		return wire.Document{Aggregate: "doc", ID: json.RawMessage(fmt.Sprintf(`{"id":%d}`, id)), Version: v, Doc: json.RawMessage(`{"a":1}`)}
	}
	// 5 at version 1 is superseded by 5 at version 2 in the same write.
	if err := s.Write(context.Background(), []wire.Document{doc(9, 1), doc(5, 1), doc(7, 1), doc(5, 2), doc(12, 1)}); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"9", "5", "7", "12"}, {"9"}}
	if fmt.Sprint(requests) != fmt.Sprint(want) {
		t.Errorf("bulk requests carried _ids %v, want %v (one per _id, then the refused one again)", requests, want)
	}
	st := s.Stats()
	if st.Written != 4 || st.Conflicts != 1 || st.Retries != 1 {
		t.Errorf("stats %+v: want 4 written, 1 conflict (5 at version 1), 1 retry round", st)
	}
}

// stubESSink is an ESSink (aggregate "doc" behind alias "docs", cfg's
// other settings) on a stand-in Elasticsearch: alias look-ups answer that
// "docs" points at "idx", every other request goes to bulk. Both close
// when the test ends.
func stubESSink(t *testing.T, cfg ESSinkConfig, bulk http.HandlerFunc) *ESSink {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Elastic-Product", "Elasticsearch")
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.URL.Path, "_alias") {
			fmt.Fprint(w, `{"idx":{"aliases":{"docs":{}}}}`)
			return
		}
		bulk(w, r)
	}))
	t.Cleanup(srv.Close)
	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client, cfg.Aliases = es, map[string]string{"doc": "docs"}
	cfg.Kafka = []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}
	s, err := NewESSink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}
