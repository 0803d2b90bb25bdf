package resolver

import (
	"testing"
	"time"
)

func TestFormatProgress(t *testing.T) {
	for _, tc := range []struct {
		done, total int64
		elapsed     time.Duration
		want        string
	}{
		{0, 100, 0, "x  0/100    0%  0/s  ETA ?"},
		{25, 100, 5 * time.Second, "x  25/100   25%  5/s  ETA 15s"},
		{100, 100, 10 * time.Second, "x  100/100  100%  10/s  done in 10s"},
	} {
		if got := formatProgress("x", tc.done, tc.total, tc.elapsed); got != tc.want {
			t.Errorf("formatProgress(%d, %d, %s) = %q, want %q", tc.done, tc.total, tc.elapsed, got, tc.want)
		}
	}
}
