// Package backoff is flowrun's one exponential backoff with full jitter: the rule function
// backoff(base, max) (package rules) and plugins.Backoff for Go handlers both draw from it, so a
// rule and a handler given the same arguments wait alike.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Full returns a uniformly random duration in [0, Cap(base, max, attempt)] (full jitter). The
// arguments are in the order the rule function takes them, the attempt last.
func Full(base, max time.Duration, attempt int) time.Duration {
	c := Cap(base, max, attempt)
	if c <= 0 {
		return 0
	}
	return time.Duration(rand.Uint64N(uint64(c) + 1)) // +1: the cap itself is a possible draw
}

// Cap is Full's upper bound, min(max, base*2^(attempt-1)), without overflow. An attempt below 1
// counts as 1; a base or max that is not positive gives 0.
func Cap(base, max time.Duration, attempt int) time.Duration {
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

// Doubling is a backoff that grows with each failure in a row: Base after the first, doubling
// up to Max (Cap), back to Base after Reset. The settler's resends and flow control's failed
// store rounds both wait by one; the zero value with Base and Max set is ready to use. It is not
// safe for concurrent use (each has one owning goroutine).
type Doubling struct {
	Base, Max time.Duration
	fails     int
}

// Fail counts one more failure in a row and returns the wait before the next try.
func (b *Doubling) Fail() time.Duration {
	b.fails++
	return b.Wait()
}

// Wait is the wait after the failures counted so far (Base when none are).
func (b *Doubling) Wait() time.Duration { return Cap(b.Base, b.Max, b.fails) }

// Reset forgets the failures: the next Fail waits Base again.
func (b *Doubling) Reset() { b.fails = 0 }
