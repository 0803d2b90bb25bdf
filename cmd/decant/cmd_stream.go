package main

import (
	"context"

	"github.com/decant-cdc/decant/streamer"
)

// newStreamStage opens the streamer; a config it refuses is exit code 2.
func newStreamStage(_ context.Context, st *stack) (stage, int, error) {
	s, err := streamer.New(st.streamerConfig())
	if err != nil {
		return stage{}, 2, err
	}
	return stage{s.Run, s.Close}, 0, nil
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
