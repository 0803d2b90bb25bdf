package opsapi

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/decant-cdc/decant/watermark"
)

// TestPageRoutes: the page and its assets are served from the binary,
// and /v1/pipeline answers 503 without a tracker (Kafka unreachable).
func TestPageRoutes(t *testing.T) {
	ts := httptest.NewServer(NewServer(slog.Default(), nil, nil, prometheus.NewRegistry(), Options{}).Handler())
	defer ts.Close()
	for path, want := range map[string]string{
		"/":                `<script src="static/page.js">`,
		"/static/page.js":  "v1/pipeline?since=",
		"/static/page.css": ".stage",
	} {
		res, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s = %d, want 200 with %q", path, res.StatusCode, want)
		}
	}
	res, err := http.Get(ts.URL + PathPipeline)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("GET %s without a tracker = %d, want 503", PathPipeline, res.StatusCode)
	}
	if res, _ := http.Get(ts.URL + "/nothing"); res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing = %d, want 404", res.StatusCode)
	}
}

// TestPageScriptEscapes: the page puts server values (table names, error
// messages) into the document only as text, never as markup.
func TestPageScriptEscapes(t *testing.T) {
	b, err := staticFiles.ReadFile("static/page.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(string(b), sink) {
			t.Errorf("page.js uses %s: build elements with el() and textContent instead", sink)
		}
	}
}

// TestPageFigures: lags and rates of each stage from two readings.
func TestPageFigures(t *testing.T) {
	at := time.Unix(1000, 0)
	reading := func(secs int, confirmed string, lagBytes, raw, mapped, refs, built, agg int64) *watermark.Positions {
		return &watermark.Positions{At: at.Add(time.Duration(secs) * time.Second),
			Slot: watermark.SlotStatus{ConfirmedLSN: confirmed, LagBytes: lagBytes},
			Raw:  []watermark.TopicPosition{{End: raw, Committed: mapped}},
			Refs: []watermark.TopicPosition{{End: refs, Committed: built}},
			Agg:  []watermark.TopicPosition{{End: agg}}}
	}
	a, b := reading(0, "0/1000", 0, 10, 10, 5, 5, 5), reading(2, "0/1800", 4096, 30, 20, 9, 7, 7)
	f := figures(b)
	for id, want := range map[string]int64{"slot": 4096, "raw": -1, "map": 10, "refs": -1, "build": 2, "agg": -1} {
		if f[id].lag != want {
			t.Errorf("lag of %s = %d, want %d", id, f[id].lag, want)
		}
	}
	for id, want := range map[string]float64{"slot": 1024, "raw": 10, "map": 5, "refs": 2, "build": 1, "agg": 1} {
		if got := rate(a, b, id); got != want {
			t.Errorf("rate of %s = %v, want %v", id, got, want)
		}
	}
	if got := rate(b, a, "raw"); got != 0 {
		t.Errorf("rate backwards = %v, want 0", got)
	}
	// Lag in seconds: the oldest uncommitted record's age, over topics.
	ts := []watermark.TopicPosition{{Oldest: at.Add(-3 * time.Second)}, {}, {Oldest: at.Add(-7 * time.Second)}}
	if got := behindSeconds(at, ts); got != 7 {
		t.Errorf("behind = %v s, want 7 (the oldest of the topics)", got)
	}
	if got := behindSeconds(at, []watermark.TopicPosition{{}}); got != 0 {
		t.Errorf("behind with nothing pending = %v, want 0", got)
	}
}
