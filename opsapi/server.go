package opsapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/decant-cdc/decant/watermark"
	"github.com/decant-cdc/decant/wire"
)

// Server is the one HTTP port of a decant process: /metrics, /healthz,
// /readyz, /v1/watermarks and /v1/wait. Safe for concurrent use.
type Server struct {
	log     *slog.Logger
	tracker *watermark.Tracker
	opts    Options
	// refresh makes written documents visible to searches (Elasticsearch
	// _refresh of every alias), shared by waiters; nil when there is no
	// search sink.
	refresh *refresher
	waiters *waiters
	gather  prometheus.Gatherer

	mu      sync.Mutex
	stages  map[string]bool   // stage → running
	stopped map[string]string // stage → why it stopped, for a stage that stopped on an error no retry fixes
	exited  map[string]string // stage → the error it returned with (the process is going down)
	// snapChecked is when the initial snapshot was last seen in progress.
	snapChecked time.Time

	page pagePoll // the pipeline page's shared poll (page.go)
}

// Options are the HTTP settings of decant.yaml (config.HTTP).
type Options struct {
	// Token, when set, is required as a bearer token by every route but
	// /healthz.
	Token string
	// MaxWait caps /v1/wait's timeout. Default: 5m.
	MaxWait time.Duration
	// RefreshInterval is the least time between two refreshes waiters
	// cause. Default: 0 (none: a refresh per round of waiters).
	RefreshInterval time.Duration
}

// NewServer returns a server answering from tracker (nil when Kafka is not
// reachable: the watermark routes then answer 503), refreshing searches
// with refresh (nil without a search sink) and serving gather on /metrics.
// It does no I/O.
func NewServer(log *slog.Logger, tracker *watermark.Tracker, refresh func(context.Context) error, gather prometheus.Gatherer, opts Options) *Server {
	if opts.MaxWait <= 0 {
		opts.MaxWait = 5 * time.Minute
	}
	o := &Server{log: log, tracker: tracker, opts: opts, gather: gather, stages: map[string]bool{}, stopped: map[string]string{}, exited: map[string]string{}}
	if refresh != nil {
		o.refresh = &refresher{refresh: refresh, interval: opts.RefreshInterval}
	}
	if tracker != nil {
		o.waiters = newWaiters(tracker)
	}
	return o
}

// Collectors are the ops API's own metrics: the refreshes waiters caused
// and the watermark tracker's PostgreSQL queries.
func (o *Server) Collectors() []prometheus.Collector {
	cs := []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "decant_ops_wait_refreshes_total",
		Help: "Search index refreshes /v1/wait callers caused (shared, at most one per http.wait_refresh_interval)."},
		func() float64 { return float64(o.Refreshes()) })}
	if o.tracker != nil {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "decant_watermark_queries_total",
			Help: "PostgreSQL queries of this process's watermark tracker (/v1/wait, /v1/watermarks, readiness)."},
			func() float64 { return float64(o.tracker.Queries()) }))
	}
	return cs
}

// Refreshes is how many search refreshes /v1/wait callers caused.
func (o *Server) Refreshes() int64 {
	if o.refresh == nil {
		return 0
	}
	return o.refresh.count.Load()
}

// SetStage records whether a stage is running, for /readyz.
func (o *Server) SetStage(name string, running bool) {
	o.mu.Lock()
	o.stages[name] = running
	o.mu.Unlock()
}

// StageStopped records that a stage stopped on an error that no retry
// fixes: /readyz answers 503 with why and the fix until the process restarts.
func (o *Server) StageStopped(name, why string) {
	o.mu.Lock()
	o.stages[name] = false
	o.stopped[name] = why
	o.mu.Unlock()
}

// StageExited records that a stage returned with err while the process
// goes on towards its exit: /healthz answers 503.
func (o *Server) StageExited(name string, err error) {
	o.mu.Lock()
	o.stages[name] = false
	o.exited[name] = err.Error()
	o.mu.Unlock()
}

// Handler routes the API. With a token, every route but /healthz needs it.
func (o *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.gather, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", o.healthz)
	mux.HandleFunc("GET /readyz", o.readyz)
	mux.HandleFunc("GET "+PathWatermarks, o.watermarks)
	mux.HandleFunc("GET "+PathWait, o.wait)
	o.pageRoutes(mux) // GET /, /static/, /v1/pipeline (page.go)
	// Profiles of the running process (docs/operations.md): the port is
	// loopback by default; expose it only where profiles may be read.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	if o.opts.Token == "" {
		return mux
	}
	return o.authorize(mux)
}

// tokenCookie carries the token for a browser, which cannot send a bearer
// header: GET /…?token=<token> sets it (HttpOnly, SameSite=Strict) and
// redirects to the same path without the token.
const tokenCookie = "decant_token"

// authorize lets a request through to next when it carries the token:
// Authorization: Bearer <token>, or the token cookie. /healthz is open.
func (o *Server) authorize(next http.Handler) http.Handler {
	want := []byte(o.opts.Token)
	ok := func(got string) bool { return got != "" && subtle.ConstantTimeCompare([]byte(got), want) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if auth, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && ok(auth) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(tokenCookie); err == nil && ok(c.Value) {
			next.ServeHTTP(w, r)
			return
		}
		if q := r.URL.Query(); r.Method == http.MethodGet && ok(q.Get("token")) {
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: o.opts.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="decant"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "this decant requires a token (http.token): send Authorization: Bearer <token>"})
	})
}

// healthz answers 200 while every stage of the process is alive (running,
// or stopped on purpose by a mapping error, which /readyz reports), 503
// once one has exited on an error and the process is going down.
func (o *Server) healthz(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.exited) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"alive": false, "exited": o.exited})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readyz answers 200 when every stage of the process runs and the initial
// snapshot is complete (documents from before it may still be missing
// until then), 503 saying why otherwise.
func (o *Server) readyz(w http.ResponseWriter, r *http.Request) {
	snapshot := o.snapshotComplete(r.Context())
	o.mu.Lock()
	defer o.mu.Unlock()
	ready := len(o.stages) > 0 && snapshot != "in progress"
	for _, running := range o.stages {
		ready = ready && running
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	body := map[string]any{"ready": ready, "stages": o.stages, "initial_snapshot": snapshot}
	if len(o.stopped) > 0 {
		body["stopped"] = o.stopped
	}
	writeJSON(w, status, body)
}

// snapshotComplete says whether the initial snapshot is "complete", "in
// progress" or "unknown" (Kafka not reachable). A complete snapshot is
// remembered (the tracker's cache); an answer in progress for 2 s, so
// frequent probes do not each read the state topic.
func (o *Server) snapshotComplete(ctx context.Context) string {
	if o.tracker == nil {
		return "unknown"
	}
	o.mu.Lock()
	if time.Since(o.snapChecked) < 2*time.Second {
		defer o.mu.Unlock()
		return "in progress"
	}
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	done, err := o.tracker.SnapshotComplete(ctx)
	switch {
	case err != nil:
		return "unknown"
	case done:
		return "complete"
	}
	o.mu.Lock()
	o.snapChecked = time.Now()
	o.mu.Unlock()
	return "in progress"
}

func (o *Server) watermarks(w http.ResponseWriter, r *http.Request) {
	if o.tracker == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "kafka is not reachable from this process"})
		return
	}
	wm, err := o.tracker.Current(r.Context())
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, wm)
}

// wait answers 200 once every change committed at or before ?lsn= is in
// every sink and searchable, 408 when ?timeout= (default 30s) passes first.
func (o *Server) wait(w http.ResponseWriter, r *http.Request) {
	lsn, err := wire.ParseLSN(r.URL.Query().Get("lsn"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "lsn: " + err.Error() + " (pass the result of SELECT pg_current_wal_lsn())"})
		return
	}
	timeout := min(30*time.Second, o.opts.MaxWait)
	if t := r.URL.Query().Get("timeout"); t != "" {
		if timeout, err = time.ParseDuration(t); err != nil || timeout <= 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "timeout: want a duration like 5s"})
			return
		}
		timeout = min(timeout, o.opts.MaxWait) // http.max_wait
	}
	if o.tracker == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "kafka is not reachable from this process"})
		return
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	err = o.waiters.wait(ctx, lsn)
	if err == nil && o.refresh != nil {
		err = o.refresh.do(ctx)
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		writeJSON(w, http.StatusRequestTimeout, map[string]string{"error": fmt.Sprintf("not indexed within %s: %v", timeout, err)})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"lsn": wire.FormatLSN(lsn), "waited_ms": time.Since(started).Milliseconds()})
}

// WaitVisible is Tracker.Wait plus a refresh so the documents are
// searchable; refresh may be nil. It blocks until ctx ends.
func WaitVisible(ctx context.Context, t *watermark.Tracker, refresh func(context.Context) error, lsn uint64) error {
	if err := t.Wait(ctx, lsn); err != nil {
		return err
	}
	if refresh != nil {
		return refresh(ctx)
	}
	return nil
}

// Serve runs the server until ctx ends. An empty addr disables it.
func (o *Server) Serve(ctx context.Context, addr string) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w (choose another port with DECANT_HTTP_LISTEN)", addr, err)
	}
	srv := &http.Server{Handler: o.Handler(), ReadHeaderTimeout: 10 * time.Second}
	o.log.Info("http server listening", "addr", ln.Addr().String())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
