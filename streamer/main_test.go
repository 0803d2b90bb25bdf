package streamer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
)

// childConfig is the config of a streamer run as a separate process (see
// startChild), so tests can kill -9 it.
type childConfig struct {
	DSN, Slot, Prefix string
	Brokers           []string
	Partitions        int
	Heartbeat         time.Duration
	ChunkRows         int // SnapshotChunkRows
}

func TestMain(m *testing.M) {
	testenv.RunChild(runChild)
	os.Exit(m.Run())
}

func runChild(ctx context.Context, c childConfig, log *slog.Logger) int {
	s, err := New(Config{DSN: c.DSN, Publication: "decant", CreatePublication: true, Slot: c.Slot, TopicPrefix: c.Prefix,
		Partitions: c.Partitions, Kafka: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, StatusInterval: 200 * time.Millisecond,
		HeartbeatInterval: c.Heartbeat, TakeoverPoll: 300 * time.Millisecond, Logger: log,
		SnapshotChunkRows: c.ChunkRows, TablePoll: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "streamer:", err)
		return 1
	}
	s.Close()
	return 0
}

// startChild runs the test binary as a streamer process for e's database.
func (e *env) startChild(logName string) *testenv.Proc {
	e.t.Helper()
	spec, _ := json.Marshal(childConfig{DSN: e.cfg.DSN, Slot: e.cfg.Slot, Prefix: e.cfg.TopicPrefix, Brokers: e.k.Brokers, Partitions: e.cfg.Partitions, Heartbeat: e.cfg.HeartbeatInterval, ChunkRows: e.cfg.SnapshotChunkRows})
	c, err := testenv.StartChild(e.t, logName, filepath.Join(e.t.TempDir(), logName+".log"), string(spec))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// peakRSS reads a process's peak resident set size in bytes.
func peakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	n, err := testenv.PeakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
