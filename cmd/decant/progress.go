package main

import (
	"fmt"
	"io"
	"time"
)

// progressLine redraws one line on a terminal: count, total, rate, ETA.
// Updates are throttled to 5 per second.
type progressLine struct {
	w        io.Writer
	label    string
	hint     string
	start    time.Time
	drawn    time.Time
	moved    time.Time
	last     int64
	hinted   bool
	anything bool
}

func newProgressLine(w io.Writer, label string) *progressLine {
	now := time.Now()
	return &progressLine{w: w, label: label, start: now, moved: now}
}

func (p *progressLine) update(done, total int64) {
	now := time.Now()
	if done != p.last {
		p.last, p.moved = done, now
	}
	if p.hint != "" && !p.hinted && now.Sub(p.moved) > 30*time.Second && done < total {
		fmt.Fprintf(p.w, "\n%s\n", p.hint)
		p.hinted = true
	}
	if now.Sub(p.drawn) < 200*time.Millisecond && done < total {
		return
	}
	p.drawn = now
	p.anything = true
	fmt.Fprintf(p.w, "\r%s\x1b[K", formatProgress(p.label, done, total, now.Sub(p.start)))
}

func (p *progressLine) finish() {
	if p.anything {
		fmt.Fprintln(p.w)
	}
}

// formatProgress renders "build customer  12345/100000  12%  5432/s  ETA 16s".
func formatProgress(label string, done, total int64, elapsed time.Duration) string {
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	pct, eta := "", "ETA ?"
	if total > 0 {
		pct = fmt.Sprintf("  %3d%%", min(100, done*100/total))
		if rate > 0 && done < total {
			eta = "ETA " + (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
		} else if done >= total {
			eta = "done in " + elapsed.Round(100*time.Millisecond).String()
		}
	}
	return fmt.Sprintf("%s  %d/%d%s  %.0f/s  %s", label, done, total, pct, rate, eta)
}
