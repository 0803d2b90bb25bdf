package main

import (
	"context"
	"fmt"
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
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "decant map: unexpected argument %q\n", pos[0])
		return 2
	}
	st, err := openStack(ctx, *configPath, "decant-map", stderr)
	if err != nil {
		fmt.Fprintln(stderr, "decant map:", err)
		return 1
	}
	defer st.close()
	if err := mappings.RequireBeforeImages(st.model, st.cat); err != nil {
		fmt.Fprintln(stderr, "decant map:", err)
		return 2
	}
	m, err := resolver.NewMapper(st.rcfg, st.model, st.pool)
	if err != nil {
		fmt.Fprintln(stderr, "decant map:", err)
		return 1
	}
	defer m.Close()
	ops, stopOps := st.startOps(ctx)
	defer stopOps()
	ops.SetStage("map", true)
	if err := m.Run(ctx); err != nil {
		st.log.Error("map stage stopped", "err", err)
		return 1
	}
	return 0
}
