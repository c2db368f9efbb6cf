package redisrun

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/workflow"
)

// Timer settings: how often RunTimers looks (timeouts fire within a second, SPEC §16), and how
// much one round moves or fires at most before it looks again at once.
const (
	TimerTick    = 250 * time.Millisecond
	timerBatch   = 128
	unknownDelay = time.Minute // a delayed message naming no step is looked at again after this
)

// RunTimers fires due timeouts and moves due delayed step messages, every TimerTick, until ctx
// ends (it returns nil then); every HygieneEvery it also trims the step streams and prunes the
// runs index (hygiene). Every process running the workflow runs it; the scripts' visit
// check and the move script's atomicity make that safe. Failures are logged once per state
// change and retried on the next tick.
func (s *Store) RunTimers(ctx context.Context, log zerolog.Logger) error {
	log = log.With().Str("workflow", s.g.Name).Logger()
	state := redisconn.NewStateLog(log, "workflow timers", redisconn.SecretsOf(s.c)...)
	tick := time.NewTicker(TimerTick)
	defer tick.Stop()
	nextHygiene := time.Now().Add(HygieneEvery)
	for {
		err := s.tick(ctx, log)
		if time.Now().After(nextHygiene) {
			nextHygiene = time.Now().Add(HygieneEvery)
			err = errors.Join(err, s.hygiene(ctx))
		}
		if err != nil && ctx.Err() == nil {
			state.Fail(err)
		} else if err == nil {
			state.OK()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// tick is one round of RunTimers: every delayed message due is moved, every timeout due fired,
// every kept event due dropped. Each pass runs whatever the others did, so one that keeps
// failing (a key Redis refuses) never stops the rest; their errors are joined.
func (s *Store) tick(ctx context.Context, log zerolog.Logger) error {
	return errors.Join(
		drain(func() (int, error) { return s.moveDue(ctx, log) }),
		drain(func() (int, error) { return s.fireTimeouts(ctx, log) }),
		s.expireAllKept(ctx, log))
}

// drain runs pass until it finds fewer than a batch due, or fails.
func drain(pass func() (int, error)) error {
	for {
		n, err := pass()
		if err != nil || n < timerBatch {
			return err
		}
	}
}

// expireAllKept drops every kept event whose time is up, when the workflow has wait steps.
func (s *Store) expireAllKept(ctx context.Context, log zerolog.Logger) error {
	if !s.hasWaits() {
		return nil
	}
	return drain(func() (int, error) { return s.expireKept(ctx, log) })
}

// moveDue moves due delayed step messages onto their streams (moveDueScript) and returns how
// many were due.
func (s *Store) moveDue(ctx context.Context, log zerolog.Logger) (int, error) {
	keys := make([]string, 0, 1+len(s.g.Steps))
	args := make([]any, 0, 3+len(s.g.Steps))
	keys = append(keys, s.k.delayed())
	args = append(args, time.Now().UnixMilli(), timerBatch, unknownDelay.Milliseconds())
	for _, st := range s.g.Steps {
		keys = append(keys, s.k.step(st.Name))
		args = append(args, st.Name)
	}
	res, err := moveDueScript.Run(ctx, s.c, keys, args...).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("redisrun: move due step messages of %s: %w", s.g.Name, err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("redisrun: move due step messages of %s: reply %v", s.g.Name, res)
	}
	if res[1] > 0 {
		log.Warn().Int64("count", res[1]).Str("key", s.k.delayed()).
			Msg("delayed step messages name no step of the workflow (or do not decode); kept, looked at again later")
	}
	return int(res[0] + res[1]), nil
}

// fireTimeouts fires the due timeouts (Graph.TimedOut, applied) and returns how many were due.
// A timeout whose visit is over (the step finished, the run moved or ended) is removed.
func (s *Store) fireTimeouts(ctx context.Context, log zerolog.Logger) (int, error) {
	now := time.Now()
	due, err := s.c.ZRangeByScore(ctx, s.k.timeouts(), &redis.ZRangeBy{
		Min: "-inf", Max: itoa64(now.UnixMilli()), Count: timerBatch,
	}).Result()
	if err != nil {
		return 0, fmt.Errorf("redisrun: read timeouts of %s: %w", s.g.Name, err)
	}
	var over []any
	for _, m := range due {
		id, visit, ok := parseTimerMember(m)
		if !ok {
			over = append(over, m)
			continue
		}
		st, err := s.Get(ctx, id)
		if errors.Is(err, workflow.ErrNoRun) {
			over = append(over, m)
			continue
		}
		if err != nil {
			return 0, err
		}
		if st.Stale(visit) {
			over = append(over, m)
			continue
		}
		applied, err := s.exec(ctx, applyOp{t: s.g.TimedOut(st, time.Now()), prev: st})
		if err != nil {
			return 0, err
		}
		if !applied {
			over = append(over, m) // the run moved meanwhile: this visit is over
			continue
		}
		log.Info().Str("run", id).Str("step", st.Step).Int("visit", visit).Msg("step timed out")
	}
	if len(over) > 0 {
		if err := s.c.ZRem(ctx, s.k.timeouts(), over...).Err(); err != nil {
			return 0, fmt.Errorf("redisrun: remove timeouts of %s: %w", s.g.Name, err)
		}
	}
	return len(due), nil
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
