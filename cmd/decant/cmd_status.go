package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/watermark"
	"github.com/decant-cdc/decant/wire"
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

type statusReport struct {
	Slot       slotStatus           `json:"slot"`
	Watermarks watermark.Watermarks `json:"watermarks"`
	DLQ        int64                `json:"dlq_records"`
	Documents  map[string]int64     `json:"documents"`
	Warnings   []string             `json:"warnings"`
}

type slotStatus struct {
	Name         string  `json:"name"`
	Active       bool    `json:"active"`
	ConfirmedLSN string  `json:"confirmed_lsn"`
	LagBytes     int64   `json:"lag_bytes"`
	LagSeconds   float64 `json:"lag_seconds"` // walsender flush lag; 0 when idle or not streaming
	WALStatus    string  `json:"wal_status"`
	SafeWALBytes *int64  `json:"safe_wal_bytes"` // bytes until max_slot_wal_keep_size; null when unlimited
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", statusHelp, stderr)
	cfgPath := configFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if _, code, ok := parseFlags(fs, args); !ok {
		return code
	}
	cfg, err := config.Load(*cfgPath, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "decant status: %v\n", err)
		return 2
	}
	env, err := openOps(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "decant status: %v\n", err)
		return 1
	}
	defer env.close()
	rep, err := collectStatus(ctx, env)
	if err != nil {
		fmt.Fprintf(stderr, "decant status: %v\n", err)
		return 1
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

func collectStatus(ctx context.Context, env *opsEnv) (*statusReport, error) {
	cfg := env.cfg
	rep := &statusReport{Documents: map[string]int64{}, Warnings: []string{}}
	rep.Slot.Name = cfg.Postgres.Slot
	var lsn, walStatus *string
	var lag, safe *int64
	var lagSecs *float64
	var maxKeep string
	err := env.pool.QueryRow(ctx, `
SELECT s.active, s.confirmed_flush_lsn::text, (pg_current_wal_lsn() - s.confirmed_flush_lsn)::int8,
       s.wal_status, s.safe_wal_size,
       (SELECT extract(epoch FROM max(r.flush_lag)) FROM pg_stat_replication r WHERE r.pid = s.active_pid),
       current_setting('max_slot_wal_keep_size')
FROM pg_replication_slots s WHERE s.slot_name = $1`, cfg.Postgres.Slot).
		Scan(&rep.Slot.Active, &lsn, &lag, &walStatus, &safe, &lagSecs, &maxKeep)
	if err != nil {
		return nil, fmt.Errorf("replication slot %s: %w (has 'decant stream' or 'decant run' ever started?)", cfg.Postgres.Slot, err)
	}
	if lsn != nil {
		rep.Slot.ConfirmedLSN = *lsn
	}
	if lag != nil {
		rep.Slot.LagBytes = *lag
	}
	if lagSecs != nil {
		rep.Slot.LagSeconds = *lagSecs
	}
	if walStatus != nil {
		rep.Slot.WALStatus = *walStatus
	}
	rep.Slot.SafeWALBytes = safe
	switch {
	case rep.Slot.WALStatus == "lost":
		rep.Warnings = append(rep.Warnings, "the slot has lost WAL it needed: drop it and let decant recreate it (a new snapshot follows)")
	case rep.Slot.WALStatus == "unreserved" || (safe != nil && *safe < rep.Slot.LagBytes/4):
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("the slot is close to max_slot_wal_keep_size (%s): start the streamer or raise the limit before WAL is removed", maxKeep))
	}
	if !rep.Slot.Active {
		rep.Warnings = append(rep.Warnings, "no streamer holds the slot: start 'decant run' or 'decant stream'")
	}
	if rep.Watermarks, err = env.tracker.Current(ctx); err != nil {
		return nil, err
	}
	cl, adm, err := kafkaAdmin(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if ends, err := adm.ListEndOffsets(ctx, wire.DLQTopic(cfg.Kafka.TopicPrefix)); err == nil {
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				rep.DLQ += o.Offset
			}
		})
	}

	if env.es != nil {
		for _, a := range env.model.Aggregates {
			res, err := esapi.CountRequest{Index: []string{a.Index}}.Do(ctx, env.es)
			if err != nil {
				continue
			}
			var c struct{ Count int64 }
			_ = json.NewDecoder(res.Body).Decode(&c)
			res.Body.Close()
			rep.Documents[a.Name] = c.Count
		}
	}
	return rep, nil
}

func printStatus(w io.Writer, r *statusReport) {
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
