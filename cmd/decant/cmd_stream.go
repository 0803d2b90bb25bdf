package main

import (
	"context"
	"fmt"
	"io"

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
	st, err := openStack(ctx, *cfgPath, "decant-stream", stderr)
	if err != nil {
		fmt.Fprintf(stderr, "decant stream: %v\n", err)
		return 1
	}
	defer st.close()
	s, err := streamer.New(st.streamerConfig())
	if err != nil {
		fmt.Fprintf(stderr, "decant stream: %v\n", err)
		return 2
	}
	defer s.Close()
	ops, stopOps := st.startOps(ctx)
	defer stopOps()
	ops.SetStage("stream", true)
	if err := s.Run(ctx); err != nil {
		st.log.Error("streamer stopped", "err", err)
		return 1
	}
	return 0
}

// streamerConfig maps decant.yaml onto the streamer. When the publication
// may be created, the mapped tables are what it covers.
func (st *stack) streamerConfig() streamer.Config {
	cfg := st.cfg
	sc := streamer.Config{
		DSN: cfg.Postgres.DSN, Publication: cfg.Postgres.Publication, CreatePublication: cfg.Postgres.CreatePublication,
		Slot: cfg.Postgres.Slot, TopicPrefix: cfg.Kafka.TopicPrefix, Partitions: cfg.Kafka.Partitions,
		ReplicationFactor: cfg.Kafka.ReplicationFactor, Kafka: st.kopts,
		SnapshotMode: cfg.Streamer.SnapshotMode, SnapshotChunkRows: cfg.Streamer.SnapshotChunkRows, StatusInterval: cfg.Streamer.StatusInterval,
		HeartbeatInterval: cfg.Streamer.HeartbeatInterval, MaxInFlight: cfg.Streamer.MaxInFlight,
		Logger: st.log, Registerer: st.reg,
	}
	if cfg.Postgres.CreatePublication {
		for _, t := range st.model.Tables() {
			sc.Tables = append(sc.Tables, t.String())
		}
	}
	return sc
}
