package opsapi

import (
	"context"
	"embed"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/decant-cdc/decant/watermark"
	"github.com/decant-cdc/decant/wire"
)

// The pipeline page: GET / serves static/index.html, which polls
// GET /v1/pipeline every second and draws it. Every figure comes from
// one poll shared by all viewers (pagePoll), which runs only while
// someone asked within pageIdle, so an unwatched page costs nothing.

// PathPipeline is the route of the pipeline page's JSON.
const PathPipeline = "/v1/pipeline"

const (
	pageEvery   = time.Second      // one reading of the positions per interval
	pageIdle    = 30 * time.Second // the poll stops this long after the last viewer's request
	pageHistory = 10 * time.Minute // samples kept for the charts
	pageCounts  = 5 * time.Second  // documents and newest records are read this often
	pageErrors  = 20               // errors kept (dead letters, failed polls)
	pageDLQRead = 5000             // dead letters read per poll at most
)

//go:embed static
var staticFiles embed.FS

// pageRoutes adds the page, its assets and its JSON to mux.
func (o *Server) pageRoutes(mux *http.ServeMux) {
	static, _ := fs.Sub(staticFiles, "static")
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET "+PathPipeline, o.pipeline)
}

// SetDocumentCounter sets how the page counts an aggregate's documents in
// the search sink (none by default).
func (o *Server) SetDocumentCounter(count watermark.DocumentCounter) {
	o.page.mu.Lock()
	o.page.count = count
	o.page.mu.Unlock()
}

// Pipeline is the answer of GET /v1/pipeline: the pipeline's stages in
// data-flow order, its aggregates, recent errors and the chart samples.
type Pipeline struct {
	At       time.Time `json:"at"`
	PollMS   int64     `json:"poll_ms"`
	WALLSN   string    `json:"wal_lsn,omitempty"`
	Stages   []Stage   `json:"stages"`
	Aggs     []AggView `json:"aggregates"`
	DLQ      int64     `json:"dead_letters"`
	Errors   []Event   `json:"errors"`
	Warnings []string  `json:"warnings"`
	// Process is what this process runs: stage → running, and why a stage
	// stopped (as /readyz); empty for a process that runs no stage.
	Process map[string]bool   `json:"process"`
	Stopped map[string]string `json:"stopped,omitempty"`
	// History holds the samples after ?since= (unix ms), oldest first:
	// all of the last pageHistory when since is absent.
	History []Sample `json:"history"`
}

// Stage is one box of the page.
type Stage struct {
	ID       string `json:"id"` // slot, raw, map, refs, build, agg
	Name     string `json:"name"`
	Detail   string `json:"detail"`
	Position string `json:"position"`
	// Lag is what the stage has not processed yet (LagUnit: bytes for the
	// slot, records for map and build); null for topics, which hold data
	// rather than process it.
	Lag        *int64                    `json:"lag"`
	LagUnit    string                    `json:"lag_unit,omitempty"`
	LagSeconds *float64                  `json:"lag_seconds,omitempty"` // slot: the walsender's flush lag; map, build: the age of the oldest record not committed
	Rate       float64                   `json:"rate"`                  // over the last 5 s
	RateUnit   string                    `json:"rate_unit"`
	CaughtUp   bool                      `json:"caught_up"`
	Topics     []watermark.TopicPosition `json:"topics,omitempty"`
}

// AggView is one aggregate's row.
type AggView struct {
	Name        string    `json:"name"`
	Topic       string    `json:"topic"`
	Records     int64     `json:"records"`             // records in its aggregate topic
	Documents   *int64    `json:"documents"`           // in the search index; null when not counted
	LastBuild   time.Time `json:"last_build,omitzero"` // newest record of its aggregate topic
	BuildLag    int64     `json:"build_lag"`           // refs not yet built
	DeadLetters int64     `json:"dead_letters"`        // dead letters naming it, since the page started reading
}

// Event is an error or a dead letter.
type Event struct {
	At      time.Time `json:"at"`
	Source  string    `json:"source"` // poll, or the stage of a dead letter
	Subject string    `json:"subject,omitempty"`
	Message string    `json:"message"`
}

// Sample is one poll, for the charts: lag and rate by stage id.
type Sample struct {
	T    int64              `json:"t"` // unix ms
	Lag  map[string]int64   `json:"lag"`
	Rate map[string]float64 `json:"rate"`
}

// pagePoll is the shared poll behind /v1/pipeline. Its fields are
// guarded by mu; the poll goroutine runs while running is true.
type pagePoll struct {
	mu       sync.Mutex
	running  bool
	lastSeen time.Time
	count    watermark.DocumentCounter

	last    *watermark.Positions
	prev    []*watermark.Positions // the last 6 readings, for rates
	samples []Sample
	errors  []Event
	docs    map[string]int64
	dead    map[string]int64 // aggregate → dead letters read
}

// pipeline answers /v1/pipeline and keeps the shared poll running.
func (o *Server) pipeline(w http.ResponseWriter, r *http.Request) {
	if o.tracker == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "kafka is not reachable from this process"})
		return
	}
	since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
	p := &o.page
	p.mu.Lock()
	p.lastSeen = time.Now()
	if !p.running {
		p.running = true
		first := make(chan struct{})
		go o.pollPage(first)
		p.mu.Unlock()
		select { // the first reading, so the page has something to draw
		case <-first:
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		p.mu.Lock()
	}
	view := o.pipelineView(since)
	p.mu.Unlock()
	o.mu.Lock()
	view.Process, view.Stopped = map[string]bool{}, map[string]string{}
	for k, v := range o.stages {
		view.Process[k] = v
	}
	for k, v := range o.stopped {
		view.Stopped[k] = v
	}
	o.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, view)
}

// pollPage reads the positions every pageEvery until nobody asked for
// pageIdle; it closes first after its first reading.
func (o *Server) pollPage(first chan struct{}) {
	p := &o.page
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dl, err := o.tracker.NewDeadLetterReader()
	if err == nil {
		defer dl.Close()
	}
	tick := time.NewTicker(pageEvery)
	defer tick.Stop()
	var counted time.Time
	lastDLQ := int64(-1)
	for i := 0; ; i++ {
		slow := time.Since(counted) >= pageCounts
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		pos, err := o.tracker.Positions(rctx, slow)
		var docs map[string]int64
		p.mu.Lock()
		count := p.count
		p.mu.Unlock()
		if err == nil && slow {
			counted = time.Now()
			if count != nil {
				docs = map[string]int64{}
				for _, a := range pos.Agg {
					if n, ok := count(rctx, a.Aggregate); ok {
						docs[a.Aggregate] = n
					}
				}
			}
		}
		var letters []watermark.DeadLetterRecord
		// The dead letters are read when their count changed, and every
		// pageCounts in case a read stopped short.
		if dl != nil && pos != nil && (pos.DLQ != lastDLQ || slow) {
			letters, lastDLQ = dl.Read(rctx, pageDLQRead, 200*time.Millisecond), pos.DLQ
		}
		rcancel()
		p.mu.Lock()
		o.record(pos, err, docs, letters)
		idle := time.Since(p.lastSeen) > pageIdle
		if idle {
			p.running = false
			p.last, p.prev, p.samples, p.errors, p.docs, p.dead = nil, nil, nil, nil, nil, nil
		}
		p.mu.Unlock()
		if i == 0 {
			close(first)
		}
		if idle {
			return
		}
		<-tick.C
	}
}

// record adds one reading; p.mu is held.
func (o *Server) record(pos *watermark.Positions, err error, docs map[string]int64, letters []watermark.DeadLetterRecord) {
	p := &o.page
	now := time.Now()
	if err != nil {
		p.addError(Event{At: now, Source: "poll", Message: err.Error()})
	}
	if p.dead == nil {
		p.dead = map[string]int64{}
	}
	var refs []watermark.TopicPosition
	if pos != nil {
		refs = pos.Refs
	}
	for _, d := range letters {
		for _, a := range d.Concerns(refs) {
			p.dead[a]++
		}
		subject := d.Table
		if d.Aggregate != "" {
			subject = d.Aggregate + " " + string(d.ID)
		} else if subject == "" {
			subject = d.Topic
		}
		p.addError(Event{At: d.At, Source: "dead letter (" + d.Stage + ")", Subject: subject, Message: d.Reason})
	}
	if docs != nil {
		p.docs = docs
	}
	if pos == nil {
		return
	}
	if p.last != nil {
		// Counts are re-read only every pageCounts: keep the newest known.
		for i := range pos.Agg {
			if pos.Agg[i].Newest.IsZero() && i < len(p.last.Agg) {
				pos.Agg[i].Newest = p.last.Agg[i].Newest
			}
		}
	}
	p.last = pos
	p.prev = append(p.prev, pos)
	if len(p.prev) > 6 {
		p.prev = p.prev[1:]
	}
	s := Sample{T: pos.At.UnixMilli(), Lag: map[string]int64{}, Rate: map[string]float64{}}
	n := len(p.prev)
	for id, v := range figures(pos) {
		if v.lag >= 0 {
			s.Lag[id] = v.lag
		}
		if n >= 2 {
			s.Rate[id] = rate(p.prev[n-2], pos, id)
		}
	}
	p.samples = append(p.samples, s)
	cut := now.Add(-pageHistory).UnixMilli()
	i := 0
	for i < len(p.samples) && p.samples[i].T < cut {
		i++
	}
	p.samples = p.samples[i:]
}

func (p *pagePoll) addError(e Event) {
	p.errors = append(p.errors, e)
	slices.SortStableFunc(p.errors, func(a, b Event) int { return a.At.Compare(b.At) })
	if len(p.errors) > pageErrors {
		p.errors = p.errors[len(p.errors)-pageErrors:]
	}
}

// figure is a stage's counter (what rates are computed from) and lag (-1
// when it has none).
type figure struct{ counter, lag int64 }

// figures are the counters and lags of every stage id in one reading.
func figures(pos *watermark.Positions) map[string]figure {
	sum := func(ts []watermark.TopicPosition, committed bool) (n, lag int64) {
		for _, t := range ts {
			if committed {
				n += t.Committed
			} else {
				n += t.End
			}
			lag += t.Lag()
		}
		return n, lag
	}
	confirmed, _ := wire.ParseLSN(pos.Slot.ConfirmedLSN)
	raw, _ := sum(pos.Raw, false)
	mapped, mapLag := sum(pos.Raw, true)
	refs, _ := sum(pos.Refs, false)
	built, buildLag := sum(pos.Refs, true)
	agg, _ := sum(pos.Agg, false)
	return map[string]figure{
		"slot": {int64(confirmed), pos.Slot.LagBytes}, "raw": {raw, -1}, "map": {mapped, mapLag},
		"refs": {refs, -1}, "build": {built, buildLag}, "agg": {agg, -1},
	}
}

// rate is stage id's counter per second from a to b.
// behindSeconds is how old, at at, the oldest record of ts that its group
// has not committed is (0 when none is known).
func behindSeconds(at time.Time, ts []watermark.TopicPosition) float64 {
	var oldest time.Time
	for _, t := range ts {
		if !t.Oldest.IsZero() && (oldest.IsZero() || t.Oldest.Before(oldest)) {
			oldest = t.Oldest
		}
	}
	if oldest.IsZero() {
		return 0
	}
	return max(0, at.Sub(oldest).Seconds())
}

func rate(a, b *watermark.Positions, id string) float64 {
	dt := b.At.Sub(a.At).Seconds()
	d := figures(b)[id].counter - figures(a)[id].counter
	if dt <= 0 || d < 0 {
		return 0
	}
	return float64(d) / dt
}

// pipelineView builds the answer from the last readings; p.mu is held.
func (o *Server) pipelineView(since int64) *Pipeline {
	p := &o.page
	v := &Pipeline{At: time.Now(), PollMS: pageEvery.Milliseconds(), Stages: []Stage{}, Aggs: []AggView{}, Errors: []Event{}, Warnings: []string{}, History: []Sample{}}
	for i := len(p.errors) - 1; i >= 0; i-- {
		v.Errors = append(v.Errors, p.errors[i])
	}
	for _, s := range p.samples {
		if s.T > since {
			v.History = append(v.History, s)
		}
	}
	pos := p.last
	if pos == nil {
		return v
	}
	v.At, v.WALLSN, v.DLQ, v.Warnings = pos.At, pos.WALLSN, pos.DLQ, append(v.Warnings, pos.Warnings...)
	first := p.prev[0]
	f := figures(pos)
	lag := func(id string) *int64 { l := f[id].lag; return &l }
	plural := func(n int, what string) string {
		if n == 1 {
			return "1 " + what
		}
		return strconv.Itoa(n) + " " + what + "s"
	}
	topics := func(ts []watermark.TopicPosition) string {
		var n int64
		for _, t := range ts {
			n += t.End
		}
		return strconv.FormatInt(n, 10) + " records"
	}
	state := "active"
	if !pos.Slot.Active {
		state = "INACTIVE"
	}
	slotSecs := pos.Slot.LagSeconds
	// How far behind in time map and build are: the age of the oldest
	// record they have not committed (read every few seconds).
	behind := func(ts []watermark.TopicPosition) *float64 { secs := behindSeconds(pos.At, ts); return &secs }
	mapPos, buildPos := "behind", "behind"
	if f["map"].lag == 0 {
		mapPos = pos.Slot.ConfirmedLSN
		if f["build"].lag == 0 {
			buildPos = mapPos
		}
	}
	v.Stages = []Stage{
		{ID: "slot", Name: "PostgreSQL slot", Detail: pos.Slot.Name + " · " + state + " · WAL " + pos.Slot.WALStatus,
			Position: pos.Slot.ConfirmedLSN, Lag: lag("slot"), LagUnit: "bytes", LagSeconds: &slotSecs, RateUnit: "WAL bytes/s",
			CaughtUp: pos.Slot.LagBytes == 0},
		{ID: "raw", Name: "raw topics", Detail: plural(len(pos.Raw), "topic"), Position: topics(pos.Raw),
			RateUnit: "records/s", Topics: pos.Raw},
		{ID: "map", Name: "map", Detail: "raw changes → refs", Position: mapPos, Lag: lag("map"), LagUnit: "records",
			LagSeconds: behind(pos.Raw), RateUnit: "records/s", CaughtUp: f["map"].lag == 0},
		{ID: "refs", Name: "refs topics", Detail: plural(len(pos.Refs), "topic"), Position: topics(pos.Refs),
			RateUnit: "refs/s", Topics: pos.Refs},
		{ID: "build", Name: "build", Detail: "refs → documents", Position: buildPos, Lag: lag("build"), LagUnit: "records",
			LagSeconds: behind(pos.Refs), RateUnit: "refs/s", CaughtUp: f["build"].lag == 0 && f["map"].lag == 0},
		{ID: "agg", Name: "aggregate topics / search indexes", Detail: plural(len(pos.Agg), "aggregate"),
			Position: topics(pos.Agg), RateUnit: "documents/s", Topics: pos.Agg},
	}
	for i := range v.Stages {
		v.Stages[i].Rate = rate(first, pos, v.Stages[i].ID)
	}
	for i, a := range pos.Agg {
		av := AggView{Name: a.Aggregate, Topic: a.Topic, Records: a.End, LastBuild: a.Newest, DeadLetters: p.dead[a.Aggregate]}
		if i < len(pos.Refs) {
			av.BuildLag = pos.Refs[i].Lag()
		}
		if n, ok := p.docs[a.Aggregate]; ok {
			av.Documents = &n
		}
		v.Aggs = append(v.Aggs, av)
	}
	return v
}
