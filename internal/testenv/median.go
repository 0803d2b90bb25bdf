package testenv

import (
	"slices"
	"time"
)

// Median is the middle of ds (the mean of the two middle ones for an even
// count): benchmarks report the median of their rounds, which one slow
// round (a checkpoint, a burst of other work) does not move.
func Median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
