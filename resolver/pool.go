package resolver

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SessionParams are the session settings documents are built under. They
// fix the text of every to_jsonb value (timestamps in UTC, shortest exact
// floats, hex bytea), so that ids built here equal the raw topics' keys
// and documents do not depend on the server's defaults. NewPool sets them.
var SessionParams = map[string]string{
	"TimeZone":           "UTC",
	"DateStyle":          "ISO, MDY",
	"IntervalStyle":      "postgres",
	"bytea_output":       "hex",
	"extra_float_digits": "1",
}

// NewPool connects a pool for the resolver with SessionParams set, and
// jit off unless dsn sets it.
// maxConns 0 keeps pgxpool's default.
func NewPool(ctx context.Context, dsn, applicationName string, maxConns int32) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("resolver: postgres.dsn: %w", err)
	}
	for k, v := range SessionParams {
		pc.ConnConfig.RuntimeParams[k] = v
	}
	// JIT compilation is off unless the DSN sets jit: the resolver's
	// statements are short and run again for every batch, and PostgreSQL
	// compiles a statement whose estimated cost passes jit_above_cost
	// (100,000 by default) again at every execution, prepared or not. The
	// demo's Build statement passes it at 1,000 ids: 20 ms of compiling
	// each time, a fifth more of the backend's CPU (docs/performance.md).
	if _, set := pc.ConnConfig.RuntimeParams["jit"]; !set {
		pc.ConnConfig.RuntimeParams["jit"] = "off"
	}
	if applicationName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = applicationName
	}
	if maxConns > 0 {
		pc.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("resolver: connect to postgres: %w", err)
	}
	return pool, nil
}
