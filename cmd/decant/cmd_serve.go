package main

import (
	"context"
	"errors"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/watermark"
)

// serve runs the HTTP port and no stage: the pipeline page, /v1/pipeline,
// /v1/watermarks, /v1/wait and /metrics of a pipeline whose stages run in
// other processes (or are paused), until ctx ends.
func serve(ctx context.Context, c *call) int {
	v, code := c.openOpsView(ctx)
	if v == nil {
		return code
	}
	defer v.close()
	if v.cfg.HTTP.Listen == "" {
		return c.fail(2, errors.New("http.listen is empty: set it, or DECANT_HTTP_LISTEN=127.0.0.1:8081"))
	}
	ops := opsapi.NewServer(v.log, v.tracker, indexer.Refreshers(v.engines, v.model.Aggregates), v.reg, opsOptions(v.cfg))
	registerAll(v.reg, ops.Collectors())
	ops.SetDocumentCounter(documentCounter(v.engines, v.model))
	if err := ops.Serve(ctx, v.cfg.HTTP.Listen); err != nil {
		return c.fail(1, err)
	}
	return 0
}

// documentCounter counts an aggregate's documents in the first engine
// (Elasticsearch when both are set); nil without a search sink.
func documentCounter(engines []indexer.Engine, model *mappings.Model) watermark.DocumentCounter {
	if len(engines) == 0 {
		return nil
	}
	return func(ctx context.Context, aggregate string) (int64, bool) {
		return indexer.CountDocuments(ctx, engines[0].Client, model.Aggregate(aggregate).Index)
	}
}
