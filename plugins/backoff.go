package plugins

import (
	"time"

	jitter "github.com/flowrun/flowrun/internal/backoff"
)

// Backoff is the delay before retrying attempt number attempt: a uniformly random duration in
// [0, min(max, base*2^(attempt-1))] (exponential, with full jitter, so that workers that failed
// together do not retry together). An attempt below 1 counts as 1. It is the rule function
// backoff(base, max), with the attempt a rule gets implicitly written last:
//
//	return plugins.RetryAfter(plugins.Backoff(time.Second, 5*time.Minute, m.Attempt())), nil
func Backoff(base, max time.Duration, attempt int) time.Duration {
	return jitter.Full(base, max, attempt)
}
