package rules

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/flowrun/flowrun/engine"
	jitter "github.com/flowrun/flowrun/internal/backoff"
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
// time: a uniformly random duration in [0, min(max, base*2^(attempt-1))] (full jitter), drawn by
// the same function as plugins.Backoff.
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
	return jitter.Full(base, maxD, attempt), nil
}
