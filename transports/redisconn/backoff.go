package redisconn

import (
	"context"
	"math/rand/v2"
	"time"
)

// Default backoff bounds for reconnecting. The cap is part of the recovery bound of SPEC §10
// (work resumes within 10 s of Redis being reachable again): a retry loop that has backed off
// to the cap tries again at most DefaultBackoffCap after Redis came back. Two seconds keeps a
// waiting process at a few attempts a second at worst, which no server notices.
const (
	DefaultBackoffBase = 100 * time.Millisecond
	DefaultBackoffCap  = 2 * time.Second
)

// Backoff is a capped exponential backoff with full jitter: the n-th wait is drawn uniformly
// from [Base, min(Cap, Base·2ⁿ)], so many workers retrying one server spread out while a wait
// never drops below Base (never a busy loop). The zero value uses the defaults. Not safe for
// concurrent use; each retry loop owns one.
type Backoff struct {
	Base time.Duration
	Cap  time.Duration
	n    int
}

// Next returns the next wait and advances.
func (b *Backoff) Next() time.Duration {
	base, capd := b.Base, b.Cap
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if capd < base {
		capd = max(DefaultBackoffCap, base)
	}
	ceil := capd
	// n only grows while the ceiling is below the cap, so the shift cannot overflow.
	if c := base << b.n; c > 0 && c < capd {
		ceil = c
		b.n++
	}
	if ceil <= base {
		return base
	}
	return base + rand.N(ceil-base+1)
}

// Reset starts the sequence again after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
