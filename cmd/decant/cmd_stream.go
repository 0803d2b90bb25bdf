package main

import (
	"context"

	"github.com/decant-cdc/decant/streamer"
)

var runStream = register(command{name: "stream", summary: "stream committed row changes from PostgreSQL into Kafka raw topics", nargs: -1, flags: noFlags(streamStage)})

func streamStage(ctx context.Context, c *call) int {
	st, err := c.openStack(ctx)
	if err != nil {
		return c.fail(1, err)
	}
	defer st.close()
	s, err := streamer.New(st.streamerConfig())
	if err != nil {
		return c.fail(2, err)
	}
	defer s.Close()
	return st.runStage(ctx, "stream", "streamer stopped", s.Run)
}

// streamerConfig maps decant.yaml onto the streamer. When the publication
// may be created, the mapped tables are what it covers.
func (st *stack) streamerConfig() streamer.Config {
	var tables []string
	if st.cfg.Postgres.CreatePublication {
		for _, t := range st.model.Tables() {
			tables = append(tables, t.String())
		}
	}
	return streamer.ConfigFrom(st.cfg, tables, st.kopts, st.log, st.reg)
}
