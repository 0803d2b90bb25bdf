package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/watermark"
)

func init() {
	register("status", "show slot lag, stage lag, watermarks, DLQ counts and documents", runStatus)
}

const statusHelp = `Usage: decant status [--json] [--config decant.yaml]

Prints how far each stage has got: the replication slot's lag (bytes and
time) and WAL retention headroom, each consumer group's lag, the watermarks,
dead-letter counts and documents per aggregate. Exit status 1 when a
warning needs attention (no streamer on the slot, slot close to
max_slot_wal_keep_size, or WAL lost).

Examples:
  decant status
  decant status --json | jq .slot.lag_bytes

Flags:
`

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", statusHelp, stderr)
	cfgPath := configFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if _, code, ok := parseFlags(fs, args); !ok {
		return code
	}
	cfg, err := config.Load(*cfgPath, os.Environ())
	if err != nil {
		return fail(stderr, "status", 2, err)
	}
	w, err := openWatch(ctx, cfg, "decant-status", stderr)
	if err != nil {
		return fail(stderr, "status", 1, err)
	}
	defer w.close()
	var count watermark.DocumentCounter
	if w.es != nil {
		count = func(ctx context.Context, aggregate string) (int64, bool) {
			return indexer.CountDocuments(ctx, w.es, w.model.Aggregate(aggregate).Index)
		}
	}
	rep, err := w.tracker.Status(ctx, count)
	if err != nil {
		return fail(stderr, "status", 1, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printStatus(stdout, rep)
	}
	if len(rep.Warnings) > 0 {
		return 1
	}
	return 0
}

func printStatus(w io.Writer, r *watermark.Status) {
	fmt.Fprintf(w, "slot %s: %s, confirmed %s, lag %s", r.Slot.Name, map[bool]string{true: "active", false: "INACTIVE"}[r.Slot.Active],
		r.Slot.ConfirmedLSN, humanBytes(r.Slot.LagBytes))
	if r.Slot.LagSeconds > 0 {
		fmt.Fprintf(w, " (%s)", time.Duration(r.Slot.LagSeconds*float64(time.Second)).Round(time.Millisecond))
	}
	if r.Slot.SafeWALBytes != nil {
		fmt.Fprintf(w, ", %s before max_slot_wal_keep_size", humanBytes(*r.Slot.SafeWALBytes))
	}
	fmt.Fprintln(w)
	wm := r.Watermarks
	fmt.Fprintf(w, "watermarks (WAL now %s):\n", wm.WALLSN)
	for _, s := range []struct {
		name string
		st   watermark.Stage
		unit string
	}{{"stream", wm.Stream, "bytes"}, {"map", wm.Map, "records"}, {"build", wm.Build, "records"}} {
		at := s.st.LSN
		if at == "" {
			at = "behind"
		}
		fmt.Fprintf(w, "  %-6s %-14s lag %d %s\n", s.name, at, s.st.Lag, s.unit)
	}
	fmt.Fprintf(w, "dead letters: %d", r.DLQ)
	if r.DLQ > 0 {
		fmt.Fprint(w, " (ever written to the .dlq topic: inspect them with the Kafka console consumer, see docs/operations.md)")
	}
	fmt.Fprintln(w)
	if len(r.Documents) > 0 {
		var parts []string
		for a, n := range r.Documents {
			parts = append(parts, fmt.Sprintf("%s=%d", a, n))
		}
		fmt.Fprintf(w, "documents: %s\n", strings.Join(parts, " "))
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "WARNING: %s\n", warn)
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
