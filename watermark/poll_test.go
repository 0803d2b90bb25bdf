package watermark

import (
	"testing"
	"time"
)

func TestNextPoll(t *testing.T) {
	const poll = time.Second
	for _, c := range []struct {
		name       string
		first, lag int64
		elapsed    time.Duration
		want       time.Duration
	}{
		{"first reading", 1000, 1000, 0, poll},
		{"nothing passed yet", 1000, 1000, 3 * time.Second, poll},
		{"far from drained", 10000, 9000, time.Second, poll},
		{"drains in a third of a poll", 1000, 100, 3 * time.Second, 333 * time.Millisecond},
		{"drains sooner than a tenth", 100000, 10, time.Second, poll / 10},
		{"drained", 1000, 0, time.Second, poll},
	} {
		got := nextPoll(poll, c.first, c.lag, c.elapsed)
		if got.Round(time.Millisecond) != c.want {
			t.Errorf("%s: nextPoll(%v, %d, %d, %v) = %v, want %v", c.name, poll, c.first, c.lag, c.elapsed, got, c.want)
		}
	}
	// A short poll (/v1/wait's 50ms) is not cut below 10ms.
	if got := nextPoll(50*time.Millisecond, 100000, 1, time.Second); got != 10*time.Millisecond {
		t.Errorf("nextPoll(50ms, …) = %v, want 10ms", got)
	}
	// A poll under 10ms stays as it is.
	if got := nextPoll(5*time.Millisecond, 100000, 1, time.Second); got != 5*time.Millisecond {
		t.Errorf("nextPoll(5ms, …) = %v, want 5ms", got)
	}
}
