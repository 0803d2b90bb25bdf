package main

import (
	"context"
	"fmt"
)

func explain(ctx context.Context, c *call, index bool) int {
	cfg, conn, code := c.connect(ctx)
	if conn == nil {
		return code
	}
	defer conn.Close(context.Background())
	model, _, err := loadAndBind(ctx, cfg, conn)
	if err != nil && (model == nil || model.Aggregate(c.args[0]) == nil) {
		fmt.Fprintln(c.stderr, err) // why the aggregate did not bind
		return 1
	}
	a, err := model.FindAggregate(c.args[0])
	if err != nil {
		return c.fail(1, err)
	}
	if index {
		writeJSON(c.stdout, map[string]any{"index": a.Index, "settings": a.IndexSettings(), "mappings": a.IndexMapping()})
		return 0
	}
	fmt.Fprint(c.stdout, a.Explain())
	return 0
}
