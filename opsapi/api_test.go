package opsapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestServerAndClient checks the routes both sides share, without a
// tracker (Kafka unreachable): readiness follows SetStage, the watermark
// routes answer 503 and a malformed LSN 400, and the client reports them.
func TestServerAndClient(t *testing.T) {
	srv := NewServer(slog.Default(), nil, nil, prometheus.NewRegistry(), Options{})
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
	ts := httptest.NewServer(NewServer(slog.Default(), nil, nil, prometheus.NewRegistry(), Options{}).Handler())
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

// TestTokenGuardsEverythingButHealthz (issue 19): with http.token set,
// every route but /healthz answers 401 without the token or with a wrong
// one; the bearer header and the browser's cookie (set by ?token=, which
// then redirects without it) let requests through; the client sends it.
func TestTokenGuardsEverythingButHealthz(t *testing.T) {
	srv := NewServer(slog.Default(), nil, nil, prometheus.NewRegistry(), Options{Token: "s3cret token"})
	srv.SetStage("map", true)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, hdr map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	if res := get("/healthz", nil); res.StatusCode != http.StatusOK {
		t.Errorf("/healthz without a token = %d, want 200 (probes need no token)", res.StatusCode)
	}
	for _, path := range []string{"/", "/v1/pipeline", "/readyz", "/metrics", "/v1/watermarks", "/v1/wait?lsn=0/1", "/debug/pprof/"} {
		for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret token"}, {"Cookie": tokenCookie + "=nope"}} {
			if res := get(path, hdr); res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s with %v = %d (%q), want 401 asking for a bearer token", path, hdr, res.StatusCode, res.Header.Get("WWW-Authenticate"))
			}
		}
		if res := get(path, map[string]string{"Authorization": "Bearer s3cret token"}); res.StatusCode == http.StatusUnauthorized {
			t.Errorf("%s with the bearer token = 401", path)
		}
	}
	res := get("/metrics?token=s3cret+token&x=1", nil)
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == tokenCookie {
			cookie = c
		}
	}
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/metrics?x=1" || cookie == nil || !cookie.HttpOnly {
		t.Fatalf("?token= = %d to %q, cookie %v; want 303 to /metrics?x=1 setting an HttpOnly cookie", res.StatusCode, res.Header.Get("Location"), cookie)
	}
	if res := get("/metrics", map[string]string{"Cookie": tokenCookie + "=" + cookie.Value}); res.StatusCode != http.StatusOK {
		t.Errorf("/metrics with the cookie = %d, want 200", res.StatusCode)
	}
	if res := get("/", map[string]string{"Cookie": tokenCookie + "=" + cookie.Value}); res.StatusCode != http.StatusOK {
		t.Errorf("the pipeline page with the cookie = %d, want 200", res.StatusCode)
	}
	if res := get("/metrics?token=wrong", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("?token=wrong = %d, want 401", res.StatusCode)
	}
	c := NewClient(ts.URL)
	if _, err := c.Watermarks(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("client without the token: %v, want a 401 error", err)
	}
	if _, err := c.WithToken("s3cret token").Watermarks(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("client with the token: %v, want past the token (503: no tracker)", err)
	}
}

// TestHealthzSaysWhenAStageExited: /healthz is 200 while the stages live
// (a stage stopped on purpose by a mapping error included), 503 once one
// exited on an error.
func TestHealthzSaysWhenAStageExited(t *testing.T) {
	srv := NewServer(slog.Default(), nil, nil, prometheus.NewRegistry(), Options{})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	code := func() int {
		res, err := http.Get(ts.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	srv.SetStage("build", true)
	srv.StageStopped("build", "the mappings no longer match")
	if got := code(); got != http.StatusOK {
		t.Errorf("/healthz with a stage stopped on purpose = %d, want 200 (/readyz says it)", got)
	}
	srv.StageExited("map", errors.New("kafka gone"))
	if got := code(); got != http.StatusServiceUnavailable {
		t.Errorf("/healthz after a stage exited = %d, want 503", got)
	}
}

// TestRefresherCoalesces (issue 19): a thousand callers over a second
// cause at most one refresh per interval, and each is answered by a
// refresh that started after it called.
func TestRefresherCoalesces(t *testing.T) {
	var mu sync.Mutex
	var starts []time.Time
	r := &refresher{interval: 100 * time.Millisecond, refresh: func(context.Context) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		return nil
	}}
	var wg sync.WaitGroup
	var late atomic.Int64
	began := time.Now()
	for i := range 1000 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Millisecond)
			called := time.Now()
			if err := r.do(context.Background()); err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			// The last refresh that started before this answer must
			// have started after the call.
			ok := false
			for _, s := range starts {
				if !s.Before(called) {
					ok = true
				}
			}
			if !ok {
				late.Add(1)
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	if max := int(took/(100*time.Millisecond)) + 2; len(starts) > max {
		t.Errorf("%d refreshes in %s, want at most %d (one per 100ms)", len(starts), took, max)
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 95*time.Millisecond {
			t.Errorf("refreshes %d and %d started %s apart, want at least the interval", i-1, i, gap)
		}
	}
	if late.Load() > 0 {
		t.Errorf("%d callers were answered by a refresh that started before they called", late.Load())
	}
	if r.count.Load() != int64(len(starts)) {
		t.Errorf("count = %d, want %d", r.count.Load(), len(starts))
	}
}
