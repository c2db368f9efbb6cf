package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/flowrun/flowrun/transports/redisconn"
)

// keepAliveChunk bounds the ids one keep-alive script handles, so one script never blocks
// Redis for long.
const keepAliveChunk = 256

// keepAlive runs until ctx ends (Close): every kaEvery, well inside min_idle, it resets the idle
// time of every tracked entry this consumer still owns (SPEC §4), so a slow handler is never
// run a second time at once by another worker.
func (s *Source) keepAlive(ctx context.Context) {
	defer close(s.kaDone)
	t := time.NewTicker(s.kaEvery)
	defer t.Stop()
	state := redisconn.NewStateLog(s.log, "redis stream keep-alive", s.secrets...)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.keepAliveOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			state.Fail(redisconn.RedactError(err, s.secrets...))
			continue
		}
		state.OK()
	}
}

func (s *Source) keepAliveOnce(ctx context.Context) error {
	// An entry younger than half the interval is refreshed at the next tick at the latest, so
	// its idle time stays below 1.5 intervals plus a run, half of min_idle.
	ids := s.track.alive(time.Now(), s.kaEvery/2)
	for len(ids) > 0 {
		n := min(len(ids), keepAliveChunk)
		chunk := ids[:n]
		ids = ids[n:]
		args := make([]any, 0, 2+len(chunk))
		args = append(args, s.o.Group, s.o.Consumer)
		for _, id := range chunk {
			args = append(args, id)
		}
		res, err := keepAliveScript.Run(ctx, s.c, []string{s.o.Stream}, args...).Slice()
		if err != nil {
			return fmt.Errorf("redisstream: keep-alive on %s: %w", s.o.Stream, err)
		}
		if len(res) != 2 {
			return fmt.Errorf("redisstream: keep-alive on %s: unexpected reply %v", s.o.Stream, res)
		}
		kept := toSet(res[0])
		other := toStrings(res[1])
		otherSet := make(map[string]bool, len(other))
		for _, id := range other {
			otherSet[id] = true
		}
		var gone []string
		for _, id := range chunk {
			if !kept[id] && !otherSet[id] {
				gone = append(gone, id)
			}
		}
		s.track.gone(gone)
		for _, id := range s.track.lose(other) {
			s.log.Warn().Str("id", id).
				Msg("another consumer claimed an entry still in flight here; it may run twice")
		}
	}
	return nil
}

func toStrings(v any) []string {
	xs, _ := v.([]any)
	out := make([]string, 0, len(xs))
	for _, x := range xs {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func toSet(v any) map[string]bool {
	xs := toStrings(v)
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}
