package main

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/config"
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
	st, err := setupResolver(ctx, *configPath, "decant-map", stderr)
	if err != nil {
		fmt.Fprintln(stderr, "decant map:", err)
		return 1
	}
	defer st.close()
	if err := requireBeforeImages(st.model, st.cat); err != nil {
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
	ops.setStage("map", true)
	if err := m.Run(ctx); err != nil {
		st.log.Error("map stage stopped", "err", err)
		return 1
	}
	return 0
}

// resolverSetup is what every resolver command needs: the config, the
// bound model, a pool with the resolver's session settings and the stage
// config.
type resolverSetup struct {
	cfg   *config.Config
	model *mappings.Model
	cat   *mappings.Catalog
	pool  *pgxpool.Pool
	rcfg  resolver.Config
	log   *slog.Logger
	reg   *prometheus.Registry // every metric of this process, served on /metrics
}

func (s *resolverSetup) close() { s.pool.Close() }

// setupResolver loads the config and mappings, binds them to the live
// catalog (every aggregate must bind) and opens the pool. It fails before
// any side effect.
func setupResolver(ctx context.Context, configPath, appName string, stderr io.Writer) (*resolverSetup, error) {
	cfg, err := config.Load(configPath, os.Environ())
	if err != nil {
		return nil, err
	}
	log := newLogger(cfg, stderr)
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return nil, err
	}
	model, cat, err := loadAndBind(ctx, cfg, conn)
	conn.Close(context.Background())
	if err != nil {
		return nil, err
	}
	kopts, err := kafkaOpts(cfg)
	if err != nil {
		return nil, err
	}
	pool, err := resolver.NewPool(ctx, cfg.Postgres.DSN, appName, 0)
	if err != nil {
		return nil, err
	}
	reg := newRegistry(cfg, pool)
	rcfg := resolver.Config{
		Kafka: kopts, TopicPrefix: cfg.Kafka.TopicPrefix, Group: cfg.Resolver.Group,
		Partitions: cfg.Kafka.Partitions, ReplicationFactor: cfg.Kafka.ReplicationFactor,
		BatchSize: cfg.Resolver.BatchSize, Logger: log, Registerer: reg,
	}
	return &resolverSetup{cfg: cfg, model: model, cat: cat, pool: pool, rcfg: rcfg, log: log, reg: reg}, nil
}
