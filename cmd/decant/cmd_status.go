package main

import (
	"context"
	"encoding/json"
	"io"
	"os"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/watermark"
)

func init() {
	register("status", "show slot lag, stage lag, watermarks, DLQ counts and documents", runStatus)
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", stderr)
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
		rep.WriteText(stdout)
	}
	if len(rep.Warnings) > 0 {
		return 1
	}
	return 0
}
