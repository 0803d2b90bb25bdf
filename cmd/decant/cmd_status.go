package main

import (
	"context"
	"flag"
	"os"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/watermark"
)

var runStatus = register(command{name: "status", summary: "show slot lag, stage lag, watermarks, DLQ counts and documents",
	nargs: -1, flags: func(fs *flag.FlagSet) func(context.Context, *call) int {
		asJSON := fs.Bool("json", false, "print JSON for scripts")
		return func(ctx context.Context, c *call) int { return status(ctx, c, *asJSON) }
	}})

func status(ctx context.Context, c *call, asJSON bool) int {
	cfg, err := config.Load(c.configPath, os.Environ())
	if err != nil {
		return c.fail(2, err)
	}
	st, err := openStackFrom(ctx, cfg, "decant-status", c.stderr)
	if err != nil {
		return c.fail(1, err)
	}
	defer st.close()
	tracker, err := st.openTracker(ctx)
	if err != nil {
		return c.fail(1, err)
	}
	defer tracker.Close()
	es, err := indexer.NewClient(cfg.Elasticsearch)
	if err != nil {
		return c.fail(1, err)
	}
	var count watermark.DocumentCounter
	if es != nil {
		count = func(ctx context.Context, aggregate string) (int64, bool) {
			return indexer.CountDocuments(ctx, es, st.model.Aggregate(aggregate).Index)
		}
	}
	rep, err := tracker.Status(ctx, count)
	if err != nil {
		return c.fail(1, err)
	}
	if asJSON {
		writeJSON(c.stdout, rep)
	} else {
		rep.WriteText(c.stdout)
	}
	if len(rep.Warnings) > 0 {
		return 1
	}
	return 0
}
