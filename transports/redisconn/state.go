package redisconn

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// StateLog logs a connection's up/down changes once each, not once per failed attempt: the
// first failure after a success logs a warning with the error, the first success after a
// failure logs that it recovered and for how long it was down. Safe for concurrent use.
type StateLog struct {
	log     zerolog.Logger
	what    string
	secrets []string

	mu    sync.Mutex
	down  bool
	since time.Time
	fails int
}

// NewStateLog returns a StateLog writing to log; what names the thing ("read", "keep-alive")
// and secrets are redacted from every error it logs.
func NewStateLog(log zerolog.Logger, what string, secrets ...string) *StateLog {
	return &StateLog{log: log, what: what, secrets: secrets}
}

// Fail records a failed attempt. It logs and returns true only on the transition to down.
func (s *StateLog) Fail(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails++
	if s.down {
		return false
	}
	s.down, s.since = true, time.Now()
	s.log.Warn().Str("error", Redact(err.Error(), s.secrets...)).
		Msgf("%s failing; retrying with backoff", s.what)
	return true
}

// OK records a success. It logs and returns true only on the transition back to up.
func (s *StateLog) OK() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		return false
	}
	s.log.Info().Dur("down_for_ms", time.Since(s.since)).Int("failed_attempts", s.fails).
		Msgf("%s recovered", s.what)
	s.down, s.fails = false, 0
	return true
}

// Down reports whether the last recorded attempt failed.
func (s *StateLog) Down() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// SetDriverLogger sends go-redis's own log lines (failed dials, pool notices), which it
// otherwise prints to stderr on every attempt, to log at debug level. go-redis has one global
// logger, so only main should call this, once.
func SetDriverLogger(log zerolog.Logger) {
	redis.SetLogger(driverLogger{log})
}

type driverLogger struct{ log zerolog.Logger }

func (l driverLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug().Str("component", "go-redis").Msgf(format, v...)
}
