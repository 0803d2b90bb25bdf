package main

import (
	"context"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/watermark"
)

func status(ctx context.Context, c *call, asJSON bool) int {
	v, code := c.openOpsView(ctx)
	if v == nil {
		return code
	}
	defer v.close()
	var count watermark.DocumentCounter
	if len(v.engines) > 0 {
		// The first engine's count (Elasticsearch when both are set).
		count = func(ctx context.Context, aggregate string) (int64, bool) {
			return indexer.CountDocuments(ctx, v.engines[0].Client, v.model.Aggregate(aggregate).Index)
		}
	}
	rep, err := v.tracker.Status(ctx, count)
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
