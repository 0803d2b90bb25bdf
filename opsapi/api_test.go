package opsapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestServerAndClient checks the routes both sides share, without a
// tracker (Kafka unreachable): readiness follows SetStage, the watermark
// routes answer 503 and a malformed LSN 400, and the client reports them.
func TestServerAndClient(t *testing.T) {
	srv := NewServer(slog.Default(), nil, nil, prometheus.NewRegistry())
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	ready := func() int {
		res, err := http.Get(ts.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Errorf("readyz with no stage = %d, want 503", got)
	}
	srv.SetStage("map", true)
	if got := ready(); got != http.StatusOK {
		t.Errorf("readyz with the map stage running = %d, want 200", got)
	}
	c := NewClient(ts.URL)
	if err := c.Wait(context.Background(), "0/16B3748", time.Second); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Wait without a tracker: %v, want a 503 error", err)
	}
	if err := c.Wait(context.Background(), "nope", time.Second); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("Wait with a malformed LSN: %v, want a 400 error", err)
	}
	if _, err := c.Watermarks(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Watermarks without a tracker: %v, want a 503 error", err)
	}
}

// The ops port serves Go's profiles (issue 14: profiles of each stage under
// load come from /debug/pprof).
func TestServerServesProfiles(t *testing.T) {
	ts := httptest.NewServer(NewServer(slog.Default(), nil, nil, prometheus.NewRegistry()).Handler())
	defer ts.Close()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1"} {
		res, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s = %d with %d bytes, want 200 with a profile", path, res.StatusCode, len(body))
		}
	}
}
