package binary

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestRunFinishesBulkLoad (issue 14): `decant run` from nothing creates
// the index for a bulk load (refresh off, no replicas) and, once the
// initial load has passed every stage, gives it the mapping's settings
// back. A load a crash left unfinished (the index still marked, refresh
// still off) is finished by the next start.
func TestRunFinishesBulkLoad(t *testing.T) {
	p := newPipeline(t)
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'item ' || g, 1 + g % 2 FROM generate_series(1, 200) g`)
	run := p.Start("run-1", nil, "run")
	waitLog(t, run, `msg="index created for a bulk load[^\n]*index=`+regexp.QuoteMeta(p.Alias)+`_`, 90*time.Second)
	waitLog(t, run, `msg="initial load complete: the index has its mapping's settings again"`, 2*time.Minute)
	p.WaitConverged(90 * time.Second)
	index := concreteIndex(t, p)
	wantSettings(t, p, index, "", "0") // the mapping: no refresh interval (the default), 0 replicas
	run.Term(60 * time.Second)

	// What a kill -9 during a load leaves: the index marked, refresh off.
	marked := mappingMeta(t, p, index)
	marked["decant_loading"] = true
	body, _ := json.Marshal(map[string]any{"_meta": marked})
	if code, resp := p.ES.Do(t, esapi.IndicesPutMappingRequest{Index: []string{index}, Body: bytes.NewReader(body)}); code != 200 {
		t.Fatalf("mark %s loading: %d %s", index, code, resp)
	}
	if code, resp := p.ES.Do(t, esapi.IndicesPutSettingsRequest{Index: []string{index}, Body: bytes.NewReader([]byte(`{"index":{"refresh_interval":"-1"}}`))}); code != 200 {
		t.Fatalf("turn refresh off on %s: %d %s", index, code, resp)
	}
	p.PG.Exec(t, `UPDATE items SET name = name || ' again' WHERE id <= 10`)
	run = p.Start("run-2", nil, "run")
	waitLog(t, run, `msg="index created for a bulk load[^\n]*index=`+regexp.QuoteMeta(index), 90*time.Second)
	waitLog(t, run, `msg="initial load complete: the index has its mapping's settings again"`, 2*time.Minute)
	wantSettings(t, p, index, "", "0")
	p.WaitConverged(90 * time.Second)
	run.Term(60 * time.Second)
}

// mappingMeta returns the _meta of an index's mapping.
func mappingMeta(t *testing.T, p *testenv.Pipeline, index string) map[string]any {
	t.Helper()
	code, body := p.ES.Do(t, esapi.IndicesGetMappingRequest{Index: []string{index}})
	var m map[string]struct {
		Mappings struct {
			Meta map[string]any `json:"_meta"`
		} `json:"mappings"`
	}
	if err := json.Unmarshal(body, &m); err != nil || code != 200 {
		t.Fatalf("GET %s/_mapping: %d %s (%v)", index, code, body, err)
	}
	return m[index].Mappings.Meta
}

// concreteIndex is the index the pipeline's alias points at.
func concreteIndex(t *testing.T, p *testenv.Pipeline) string { return aliasIndex(t, p, p.Alias) }

// wantSettings checks an index's refresh interval and replica count ("":
// not set, the default).
func wantSettings(t *testing.T, p *testenv.Pipeline, index, refresh, replicas string) {
	t.Helper()
	code, body := p.ES.Do(t, esapi.IndicesGetSettingsRequest{Index: []string{index}, FlatSettings: esapi.BoolPtr(true)})
	var r map[string]struct {
		Settings map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(body, &r); err != nil || code != 200 {
		t.Fatalf("GET %s/_settings: %d %s (%v)", index, code, body, err)
	}
	s := r[index].Settings
	if got, _ := s["index.refresh_interval"].(string); got != refresh {
		t.Errorf("%s: index.refresh_interval = %q, want %q", index, got, refresh)
	}
	if got, _ := s["index.number_of_replicas"].(string); got != replicas {
		t.Errorf("%s: index.number_of_replicas = %q, want %q", index, got, replicas)
	}
}

// waitLog waits until the process's output matches re.
func waitLog(t *testing.T, pr *testenv.Proc, re string, timeout time.Duration) {
	t.Helper()
	rx := regexp.MustCompile(re)
	testenv.WaitFor(t, "the log of "+pr.Name+" to match "+re, timeout, func() (bool, error) {
		return rx.MatchString(pr.Output()), nil
	})
}

// TestRunStoppedWhileFinishingLoad (issue 14): SIGTERM while the build
// stage is giving a loaded index its settings back — the moment its
// documents become searchable — still finishes the load before decant
// exits: the index has the mapping's settings and no loading mark, so no
// reader is left with refresh off until the next start. Elasticsearch is
// reached through a proxy that signals that request and holds it for a
// second, while the test stops decant.
func TestRunStoppedWhileFinishingLoad(t *testing.T) {
	es := testenv.Elasticsearch(t)
	upstream, err := url.Parse(es.URL)
	if err != nil {
		t.Fatal(err)
	}
	restoring := make(chan struct{})
	var once sync.Once
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/_settings") {
			once.Do(func() { close(restoring) })
			time.Sleep(time.Second)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	spec := items
	spec.ESAddr = strings.TrimPrefix(srv.URL, "http://")
	p := testenv.NewPipeline(t, spec)
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'item ' || g, 1 + g % 2 FROM generate_series(1, 200) g`)
	run := p.Start("run-1", nil, "run")
	select {
	case <-restoring:
	case <-time.After(2 * time.Minute):
		t.Fatalf("decant run never gave the loaded index its settings back; log:\n%s", run.Tail(40))
	}
	if code := run.Term(60 * time.Second); code != 0 {
		t.Fatalf("decant run exited %d after SIGTERM; log:\n%s", code, run.Tail(40))
	}
	index := concreteIndex(t, p)
	wantSettings(t, p, index, "", "0")
	if v, ok := mappingMeta(t, p, index)["decant_loading"]; ok {
		t.Errorf("%s still marked decant_loading=%v after a stop while its load finished; log:\n%s", index, v, run.Tail(20))
	}
}
