package rules

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/flowrun/flowrun/engine"
)

var errNegative = errors.New("negative duration")

// parseDuration parses a duration string as in the config (Go syntax), refusing negatives.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %s", strconv.Quote(s))
	}
	if d < 0 {
		return 0, fmt.Errorf("%w %s", errNegative, strconv.Quote(s))
	}
	return d, nil
}

func durationArg(v any) (time.Duration, error) {
	switch v := v.(type) {
	case string:
		return parseDuration(v)
	case time.Duration:
		if v < 0 {
			return 0, fmt.Errorf("%w %s", errNegative, v)
		}
		return v, nil
	}
	return 0, fmt.Errorf("expected a duration or a duration string, got %T", v)
}

// retryAfter implements retry_after(d).
func retryAfter(args ...any) (any, error) {
	d, err := durationArg(args[0])
	if err != nil {
		return nil, fmt.Errorf("retry_after: %w", err)
	}
	return engine.RetryAfter(d), nil
}

// backoff implements backoff(base, max) with the attempt as a third argument added at compile
// time: a uniformly random duration in [0, min(max, base*2^(attempt-1))] (full jitter).
func backoff(args ...any) (any, error) {
	base, err := durationArg(args[0])
	if err != nil {
		return nil, fmt.Errorf("backoff: base: %w", err)
	}
	maxD, err := durationArg(args[1])
	if err != nil {
		return nil, fmt.Errorf("backoff: max: %w", err)
	}
	attempt, _ := args[2].(int)
	return Backoff(base, maxD, attempt), nil
}

// Backoff returns a uniformly random duration in [0, min(max, base*2^(attempt-1))]; an attempt
// below 1 counts as 1. It is the expression function backoff, exported for Go handlers.
func Backoff(base, max time.Duration, attempt int) time.Duration {
	c := BackoffCap(base, max, attempt)
	if c <= 0 {
		return 0
	}
	return time.Duration(rand.Uint64N(uint64(c) + 1)) // +1: the cap itself is a possible draw
}

// BackoffCap is the upper bound of Backoff: min(max, base*2^(attempt-1)), without overflow.
func BackoffCap(base, max time.Duration, attempt int) time.Duration {
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
