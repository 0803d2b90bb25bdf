package main

import (
	"context"
	"fmt"
	"io"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/streamer"
)

func init() {
	register("stream", "stream committed row changes from PostgreSQL into Kafka raw topics", runStream)
}

const streamHelp = `Usage: decant stream [--config decant.yaml]

Runs the streamer stage alone: takes the replication slot (creating it and
snapshotting every published table on first start), then writes every
committed row change to <prefix>.raw.<schema>.<table>. A second instance
stands by and takes over when the first dies: the slot is the lock.

Examples:
  decant stream --config decant.yaml
  DECANT_POSTGRES_SLOT=decant_eu decant stream

Flags:
`

func runStream(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("stream", streamHelp, stderr)
	cfgPath := configFlag(fs)
	if _, code, ok := parseFlags(fs, args); !ok {
		return code
	}
	st, err := setupResolver(ctx, *cfgPath, "decant-stream", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "decant stream: %v\n", err)
		return 1
	}
	defer st.close()
	scfg, err := streamerConfig(ctx, st.cfg)
	if err != nil {
		fmt.Fprintf(stderr, "decant stream: %v\n", err)
		return 1
	}
	scfg.Logger, scfg.Registerer = st.log, st.reg
	s, err := streamer.New(scfg)
	if err != nil {
		fmt.Fprintf(stderr, "decant stream: %v\n", err)
		return 2
	}
	defer s.Close()
	ops, stopOps := st.startOps(ctx)
	defer stopOps()
	ops.setStage("stream", true)
	if err := s.Run(ctx); err != nil {
		st.log.Error("streamer stopped", "err", err)
		return 1
	}
	return 0
}

// streamerConfig maps decant.yaml onto the streamer. When the publication
// may be created, the mapped tables are what it covers.
func streamerConfig(ctx context.Context, cfg *config.Config) (streamer.Config, error) {
	kopts, err := kafkaOpts(cfg)
	if err != nil {
		return streamer.Config{}, err
	}
	sc := streamer.Config{
		DSN: cfg.Postgres.DSN, Publication: cfg.Postgres.Publication, CreatePublication: cfg.Postgres.CreatePublication,
		Slot: cfg.Postgres.Slot, TopicPrefix: cfg.Kafka.TopicPrefix, Partitions: cfg.Kafka.Partitions,
		ReplicationFactor: cfg.Kafka.ReplicationFactor, Kafka: kopts,
		SnapshotMode: cfg.Streamer.SnapshotMode, SnapshotChunkRows: cfg.Streamer.SnapshotChunkRows, StatusInterval: cfg.Streamer.StatusInterval,
		HeartbeatInterval: cfg.Streamer.HeartbeatInterval, MaxInFlight: cfg.Streamer.MaxInFlight,
	}
	if sc.HeartbeatInterval == 0 { // in decant.yaml, 0 means off
		sc.HeartbeatInterval = -1
	}
	if cfg.Postgres.CreatePublication {
		conn, err := connectPG(ctx, cfg)
		if err != nil {
			return sc, err
		}
		defer conn.Close(context.Background())
		model, _, err := loadAndBind(ctx, cfg, conn)
		if err != nil {
			return sc, err
		}
		for _, t := range model.Tables() {
			sc.Tables = append(sc.Tables, t.String())
		}
	}
	return sc, nil
}
