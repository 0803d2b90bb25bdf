package opsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
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
	// refresh makes written documents visible to searches (Elasticsearch
	// _refresh of every alias); nil when there is no search sink.
	refresh func(ctx context.Context) error
	gather  prometheus.Gatherer

	mu      sync.Mutex
	stages  map[string]bool   // stage → running
	stopped map[string]string // stage → why it stopped, for a stage that stopped on an error no retry fixes

	page pagePoll // the pipeline page's shared poll (page.go)
}

// NewServer returns a server answering from tracker (nil when Kafka is not
// reachable: the watermark routes then answer 503), refreshing searches
// with refresh (nil without a search sink) and serving gather on /metrics.
// It does no I/O.
func NewServer(log *slog.Logger, tracker *watermark.Tracker, refresh func(context.Context) error, gather prometheus.Gatherer) *Server {
	return &Server{log: log, tracker: tracker, refresh: refresh, gather: gather, stages: map[string]bool{}, stopped: map[string]string{}}
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

// Handler routes the API.
func (o *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.gather, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
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
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (o *Server) readyz(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ready := len(o.stages) > 0
	for _, running := range o.stages {
		ready = ready && running
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	body := map[string]any{"ready": ready, "stages": o.stages}
	if len(o.stopped) > 0 {
		body["stopped"] = o.stopped
	}
	writeJSON(w, status, body)
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
	timeout := 30 * time.Second
	if t := r.URL.Query().Get("timeout"); t != "" {
		if timeout, err = time.ParseDuration(t); err != nil || timeout <= 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "timeout: want a duration like 5s"})
			return
		}
	}
	if o.tracker == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "kafka is not reachable from this process"})
		return
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	err = WaitVisible(ctx, o.tracker, o.refresh, lsn)
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
