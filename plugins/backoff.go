package plugins

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is the delay before retry number attempt, with full jitter: a uniformly random
// duration in [0, min(max, base*2^(attempt-1))]. An attempt below 1 counts as 1. It is what the
// rule function backoff(base, max) computes, for handlers that return
// engine.RetryAfter(plugins.Backoff(d.Attempt, base, max)).
func Backoff(attempt int, base, max time.Duration) time.Duration {
	c := backoffCap(attempt, base, max)
	switch {
	case c <= 0:
		return 0
	case c == math.MaxInt64:
		return time.Duration(rand.Int64()) // already [0, MaxInt64]; c+1 would overflow
	}
	return time.Duration(rand.Int64N(int64(c) + 1)) // +1: the cap itself is a possible draw
}

// backoffCap is Backoff's upper bound, min(max, base*2^(attempt-1)), without overflow.
func backoffCap(attempt int, base, max time.Duration) time.Duration {
	if base <= 0 || max <= 0 {
		return 0
	}
	if attempt < 1 {
		attempt = 1
	}
	shift := attempt - 1
	if shift >= 63 || base > max>>shift {
		return max
	}
	return base << shift
}
