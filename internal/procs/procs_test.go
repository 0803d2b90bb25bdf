package procs

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"
)

func TestControllerSteps(t *testing.T) {
	c := Default()
	steps := []struct {
		cores float64
		one   bool
	}{
		{1.4, false}, // a snapshot: the default
		{0.5, false}, {0.5, false}, {0.5, false}, {0.5, false},
		{0.7, false}, // not under Down: the count starts again
		{0.1, false}, {0.2, false}, {0.3, false}, {0.4, false},
		{0.5, true}, // the fifth interval in a row under Down
		{0.8, true}, // under Up: stays on one
		{0.0, true},
		{0.9, false}, // over Up once: the default at once
		{0.1, false}, {0.1, false}, {0.1, false}, {0.1, false},
		{0.1, true},
	}
	for i, s := range steps {
		if got := c.Step(s.cores); got != s.one {
			t.Fatalf("step %d (%.1f cores): one processor %v, want %v", i, s.cores, got, s.one)
		}
	}
}

// An idle process drops to one processor, gets the default back when
// busy and when Run stops; GOMAXPROCS in the environment turns the
// controller off, and so does a default of one processor.
func TestRunLowersAndRestores(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	runtime.SetDefaultGOMAXPROCS()
	def := runtime.GOMAXPROCS(0)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if def == 1 { // one CPU (or a cgroup limit of one): nothing to lower
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		Run(ctx, log, 10*time.Millisecond)
		if ctx.Err() != nil || runtime.GOMAXPROCS(0) != 1 {
			t.Fatalf("with a default of one processor Run waited (%v) or changed GOMAXPROCS to %d", ctx.Err(), runtime.GOMAXPROCS(0))
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Run(ctx, log, 10*time.Millisecond) }()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.GOMAXPROCS(0) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS still %d after 10 s idle", runtime.GOMAXPROCS(0))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Busy on the one processor: the default comes back.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	deadline = time.Now().Add(10 * time.Second)
	for runtime.GOMAXPROCS(0) != def {
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("GOMAXPROCS still %d after 10 s of a busy processor", runtime.GOMAXPROCS(0))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	// Idle again, then stopped while on one processor.
	deadline = time.Now().Add(10 * time.Second)
	for runtime.GOMAXPROCS(0) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS still %d after 10 s idle again", runtime.GOMAXPROCS(0))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if got := runtime.GOMAXPROCS(0); got != def {
		t.Fatalf("GOMAXPROCS %d after Run returned, want the default %d", got, def)
	}

	t.Setenv("GOMAXPROCS", "2")
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	Run(ctx, log, 10*time.Millisecond) // returns at once
	if ctx.Err() != nil {
		t.Fatal("Run waited for its context with GOMAXPROCS set in the environment")
	}
	if got := runtime.GOMAXPROCS(0); got != def {
		t.Fatalf("GOMAXPROCS %d with GOMAXPROCS=2 in the environment, want %d untouched", got, def)
	}
}
