package streamer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// childEnv carries the config of a streamer run as a separate process, so
// tests can kill -9 it. See startChild.
const childEnv = "DECANT_TEST_STREAMER_CHILD"

type childConfig struct {
	DSN, Slot, Prefix string
	Brokers           []string
	Partitions        int
	Heartbeat         time.Duration
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(runChild(spec))
	}
	os.Exit(m.Run())
}

func runChild(spec string) int {
	var c childConfig
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := New(Config{DSN: c.DSN, Publication: "decant", CreatePublication: true, Slot: c.Slot, TopicPrefix: c.Prefix,
		Partitions: c.Partitions, Kafka: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, StatusInterval: 200 * time.Millisecond,
		HeartbeatInterval: c.Heartbeat, TakeoverPoll: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "streamer:", err)
		return 1
	}
	s.Close()
	return 0
}

// child is a streamer in its own process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startChild runs the test binary as a streamer process for e's database.
func (e *env) startChild(logName string) *child {
	e.t.Helper()
	spec, _ := json.Marshal(childConfig{DSN: e.cfg.DSN, Slot: e.cfg.Slot, Prefix: e.cfg.TopicPrefix, Brokers: e.k.Brokers, Partitions: e.cfg.Partitions, Heartbeat: e.cfg.HeartbeatInterval})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	logf, err := os.Create(e.t.TempDir() + "/" + logName + ".log")
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(c.done) }()
	e.t.Cleanup(func() { c.kill() })
	return c
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// term sends SIGTERM and waits.
func (c *child) term() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		c.kill()
	}
}
