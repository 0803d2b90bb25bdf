// Package procs runs a long-lived decant process on one processor while it
// needs less than one, and on the runtime's default (GOMAXPROCS) otherwise.
//
// Most of the time a pipeline process is nearly idle: a change at a time
// crosses three stages, each hop a goroutine woken by the network. With a
// second processor idle, the Go scheduler wakes a second thread for each
// hop, which spins looking for work and parks again: on a 2-core machine
// shared with PostgreSQL, Kafka and Elasticsearch, decant spent a fifth
// less CPU per change at 100 changes/s on one processor, up to a third
// less at half of make bench-freshness's maximum rate, and a sixth less
// in Kafka-sink-only backfills (docs/performance.md, thirty-fourth
// pass). An initial snapshot needs more than one processor, though: it
// took half as long again on one. So the process starts on the default,
// drops to one processor after a while of using less than Down of a
// core, and returns to the default as soon as one second on one
// processor uses more than Up of it.
package procs

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"time"
)

// Controller decides the number of processors from the process's CPU use,
// one interval at a time.
type Controller struct {
	Down      float64 // cores: below this for DownAfter intervals, one processor
	DownAfter int
	Up        float64 // cores: above this in one interval on one processor, the default

	one bool // running on one processor
	low int  // consecutive intervals below Down
}

// Default is the controller Run uses: one processor after 5 intervals
// (seconds) under 0.6 of a core, the default again after one over 0.85.
func Default() *Controller { return &Controller{Down: 0.6, DownAfter: 5, Up: 0.85} }

// Step takes the cores used over the last interval and says whether the
// process should now run on one processor.
func (c *Controller) Step(cores float64) (one bool) {
	if c.one {
		if cores > c.Up {
			c.one, c.low = false, 0
		}
		return c.one
	}
	if cores < c.Down {
		c.low++
	} else {
		c.low = 0
	}
	if c.low >= c.DownAfter {
		c.one, c.low = true, 0
	}
	return c.one
}

// Run applies Default's decisions every interval until ctx ends, then
// restores the default. It does nothing when GOMAXPROCS is set in the
// environment (the operator chose) or the default is one processor
// already.
func Run(ctx context.Context, log *slog.Logger, interval time.Duration) {
	if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) <= 1 {
		return
	}
	c := Default()
	t := time.NewTicker(interval)
	defer t.Stop()
	last, at := cpuTime(), time.Now()
	defer func() {
		if c.one {
			runtime.SetDefaultGOMAXPROCS()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, cpu := time.Now(), cpuTime()
		cores := (cpu - last).Seconds() / now.Sub(at).Seconds()
		last, at = cpu, now
		was := c.one
		if one := c.Step(cores); one != was {
			if one {
				runtime.GOMAXPROCS(1)
			} else {
				runtime.SetDefaultGOMAXPROCS()
			}
			log.Debug("processors changed", "gomaxprocs", runtime.GOMAXPROCS(0), "cores_used", cores)
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
