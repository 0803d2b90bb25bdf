package main

import (
	"context"
	"io"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/resolver"
)

func init() {
	register("map", "run the map stage: raw changes → refs of affected aggregates", runMap)
}

const mapHelp = `Usage: decant map [--config decant.yaml]

Runs the map stage until SIGINT or SIGTERM: consumes the raw topics of every
mapped table (consumer group <resolver.group>.map), resolves each batch of
changes to the aggregate ids it affects with one lookup query per route,
and produces refs to <prefix>.refs.<aggregate>. Offsets are committed only
after Kafka acknowledged the refs. Run several for more throughput: they
share the raw partitions.

Examples:
  decant map
  DECANT_KAFKA_BROKERS=kafka:9092 decant map --config /etc/decant/decant.yaml

Flags:
`

func runMap(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("map", mapHelp, stderr)
	configPath := configFlag(fs)
	pos, code, ok := parseFlags(fs, args)
	if !ok {
		return code
	}
	if !wantArgs(stderr, "map", pos, 0, "") {
		return 2
	}
	st, err := openStack(ctx, *configPath, "decant-map", stderr)
	if err != nil {
		return fail(stderr, "map", 1, err)
	}
	defer st.close()
	if err := mappings.RequireBeforeImages(st.model, st.cat); err != nil {
		return fail(stderr, "map", 2, err)
	}
	m, err := resolver.NewMapper(st.rcfg, st.model, st.pool)
	if err != nil {
		return fail(stderr, "map", 1, err)
	}
	defer m.Close()
	return st.runStage(ctx, "map", m.Run)
}
