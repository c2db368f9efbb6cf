// Package schedule is the schedule source (SPEC §17): a message per tick of a clock, a cron
// expression or a fixed interval, for a pipeline or a workflow's start.
//
// Each tick is taken once across every process that runs the pipeline against the same Redis:
// at the tick, each process runs one script that SETs flowrun:schedule:{<pipeline>}:<unix-ms>
// NX with an expiry, and only the process whose SET succeeded hands the tick's message to its
// handlers. The same script raises flowrun:schedule:{<pipeline>}:last to the tick, so catch_up
// (at start, fire the ticks missed since then, at most catch_up back) starts after the newest
// tick any process took and never fires one twice. Without Redis the ticks are taken within the
// process.
//
// A tick's message settles as a Pub/Sub message does (SPEC §4): there is nothing to
// acknowledge; a retry copy is held in the process and handed to the handlers again (only under
// max_attempts or dead_letter, as the engine decides); dead letters are XADDed to a stream. A
// process that dies between taking a tick and finishing it loses that tick: no other process
// takes it, since its key says it was taken.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// HeaderScheduledAt is the tick a schedule message is for, RFC 3339 (engine.HeaderScheduledAt).
const HeaderScheduledAt = engine.HeaderScheduledAt

// Late is how long after its time a running process still takes a tick it could not take on
// time (its handlers were busy, Redis did not answer): past that, and past catch_up, the tick
// is skipped and logged. A variable so that tests can shorten it.
var Late = time.Minute

// keyMargin is how much longer than the window a tick's key lives, so that a process whose
// clock lags (or that is slow) by up to this much still finds the tick taken.
const keyMargin = time.Hour

// Options configure a schedule source.
type Options struct {
	// Pipeline names the pipeline (a workflow's start: the workflow): it is the messages' Key
	// and part of the tick keys.
	Pipeline string
	Clock    Clock
	// CatchUp is how far back a start fires the ticks missed since the last one taken (0:
	// none).
	CatchUp time.Duration
}

// window is how late a tick may still be taken.
func (o Options) window() time.Duration { return o.CatchUp + Late }

// Expiry is how long a tick's key lives: the window and a margin for clocks that disagree.
func (o Options) Expiry() time.Duration { return o.window() + keyMargin }

// Source is a schedule source. Receive runs in one goroutine; Settle and Requeue may run
// alongside it.
type Source struct {
	engine.ErrorHook

	opts   Options
	claims claimer
	client redis.UniversalClient // nil without Redis: dead letters cannot be written
	log    zerolog.Logger
	state  *redisconn.StateLog
	ready  atomic.Bool

	mu     sync.Mutex
	held   []*engine.Message // retry copies, handed to the handlers again by Receive
	wake   chan struct{}     // a copy was held
	closed bool
}

var _ engine.Source = (*Source)(nil)

// sourceSeq numbers the sources of this process, for their owner names.
var sourceSeq atomic.Int64

// token is what Delivery.Token holds: whether its copy was taken, so a batch the engine sends
// again holds or writes no copy twice.
type token struct{ done bool }

// New returns a schedule source taking its ticks in client's Redis, or within the process when
// client is nil. The caller owns client.
func New(client redis.UniversalClient, opts Options, log zerolog.Logger) (*Source, error) {
	if opts.Pipeline == "" {
		return nil, errors.New("schedule: no pipeline name")
	}
	if opts.Clock.cron == nil && opts.Clock.every <= 0 {
		return nil, errors.New("schedule: no cron or every")
	}
	s := &Source{opts: opts, client: client, log: log, wake: make(chan struct{}, 1)}
	if client == nil {
		s.claims = memClaimer{pipeline: opts.Pipeline}
		s.state = redisconn.NewStateLog(log, "schedule")
	} else {
		// The owner names this source, not only the process: a reload's new source in the same
		// process must not pass for the old one.
		host, _ := os.Hostname()
		s.claims = &redisClaimer{c: client, pipeline: opts.Pipeline, expiry: opts.Expiry(),
			owner: fmt.Sprintf("%s:%d:%d", host, os.Getpid(), sourceSeq.Add(1))}
		s.state = redisconn.NewStateLog(log, "schedule ticks", redisconn.SecretsOf(client)...)
	}
	return s, nil
}

// Capabilities: nothing to acknowledge, as Pub/Sub.
func (s *Source) Capabilities() engine.Capabilities { return engine.Capabilities{} }

// Ready reports whether the source's Redis answered the last time it was asked.
func (s *Source) Ready() bool { return s.ready.Load() }

// Close drops the copies still held; they are logged, as a crash would lose them.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.held); n > 0 {
		s.log.Warn().Int("copies", n).Msg("retry copies of schedule ticks dropped at stop")
	}
	s.held, s.closed = nil, true
	return nil
}

// Receive hands each tick this process takes to feed, until ctx ends. It starts after now, or
// with catch_up after the last tick taken (at most catch_up back).
func (s *Source) Receive(ctx context.Context, feed engine.Feed) error {
	defer s.ready.Store(false)
	from, err := s.start(ctx)
	if err != nil || ctx.Err() != nil {
		return err
	}
	var (
		room    int
		skipped int
	)
	for ctx.Err() == nil {
		if room == 0 {
			if room = feed.Room(ctx); room == 0 {
				break
			}
		}
		if ds := s.takeHeld(room); len(ds) > 0 {
			room -= len(ds)
			if !feed.Push(ctx, ds) {
				break
			}
			continue
		}
		tick := s.opts.Clock.Next(from)
		if !s.waitFor(ctx, tick) {
			continue // a copy to hand over, or the end
		}
		from = tick
		if time.Since(tick) > s.opts.window() {
			skipped++
			continue
		}
		if skipped > 0 {
			s.log.Warn().Int("ticks", skipped).Int64("late_ms", s.opts.window().Milliseconds()).
				Msg("schedule ticks skipped: too late to take (handlers busy, Redis down or the process paused)")
			skipped = 0
		}
		owned, late, err := s.claim(ctx, tick)
		if err != nil {
			return err
		}
		if late {
			skipped++ // logged once, with the others, when a tick is taken again or at the end
			continue
		}
		if !owned {
			continue
		}
		room--
		if !feed.Push(ctx, []*engine.Delivery{s.delivery(tick)}) {
			s.log.Warn().Time("scheduled_at", tick).Msg("schedule tick taken but not handled: stopping")
			break
		}
	}
	if skipped > 0 {
		s.log.Warn().Int("ticks", skipped).Msg("schedule ticks skipped: too late to take (handlers busy, Redis down or the process paused)")
	}
	return ctx.Err()
}

// start is the instant after which ticks are taken: now, or under catch_up the last tick taken
// by any process when that is less than catch_up ago, else catch_up ago. A schedule that never
// fired has missed nothing.
func (s *Source) start(ctx context.Context) (time.Time, error) {
	now := time.Now()
	var bo redisconn.Backoff
	for {
		// Read even without catch_up: ready means Redis answered (SPEC §10), not that a
		// process started.
		last, ok, err := s.claims.Last(ctx)
		if err == nil {
			s.ready.Store(true)
			s.state.OK()
			switch floor := now.Add(-s.opts.CatchUp); {
			case s.opts.CatchUp <= 0, !ok:
				return now, nil
			case last.Before(floor):
				return floor, nil
			}
			return last, nil
		}
		if ctx.Err() != nil {
			return now, nil
		}
		if redisconn.IsConfigError(err) {
			return now, fmt.Errorf("schedule: %w", err)
		}
		s.fail(err)
		if !redisconn.Sleep(ctx, bo.Next()) {
			return now, nil
		}
	}
}

// claim takes tick, retrying a Redis that does not answer while the tick is within the window;
// late reports a tick given up once that passed (the caller counts it, so an outage is not a
// line per tick). An error is final (a configuration mistake such as a wrong password).
func (s *Source) claim(ctx context.Context, tick time.Time) (owned, late bool, err error) {
	var bo redisconn.Backoff
	for {
		owned, err := s.claims.Claim(ctx, tick)
		if err == nil {
			s.ready.Store(true)
			s.state.OK()
			return owned, false, nil
		}
		if ctx.Err() != nil {
			return false, false, nil
		}
		if redisconn.IsConfigError(err) {
			return false, false, fmt.Errorf("schedule: %w", err)
		}
		s.fail(err)
		if time.Since(tick) > s.opts.window() {
			return false, true, nil
		}
		if !redisconn.Sleep(ctx, bo.Next()) {
			return false, false, nil
		}
	}
}

func (s *Source) fail(err error) {
	s.ready.Store(false)
	s.state.Fail(err)
	s.ReportError()
}

// waitFor waits until tick (true), or until a copy is held or ctx ends (false). A zero tick (a
// cron expression that never matches) waits for those only.
func (s *Source) waitFor(ctx context.Context, tick time.Time) bool {
	var due <-chan time.Time
	if !tick.IsZero() {
		d := time.Until(tick)
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		defer t.Stop()
		due = t.C
	}
	select {
	case <-due:
		return true
	case <-s.wake:
		return false
	case <-ctx.Done():
		return false
	}
}

// delivery is tick's message: Key the pipeline, ID and x-scheduled-at the tick (RFC 3339, UTC),
// the payload {"scheduled_at": ...}. The ID makes a workflow's default run id KEY/ID name the
// tick, so one tick never starts two runs.
func (s *Source) delivery(tick time.Time) *engine.Delivery {
	at := tick.UTC().Format(time.RFC3339Nano)
	return &engine.Delivery{
		Message: engine.Message{
			Key:     s.opts.Pipeline,
			ID:      at,
			Headers: map[string]string{HeaderScheduledAt: at},
			Payload: []byte(`{"scheduled_at":"` + at + `"}`),
			Form:    engine.FormJSON,
		},
		Token: &token{},
	}
}

// hold keeps copies for Receive to hand over again.
func (s *Source) hold(msgs ...*engine.Message) {
	s.mu.Lock()
	if !s.closed {
		s.held = append(s.held, msgs...)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// takeHeld returns up to n held copies as deliveries, their ID the tick again (a copy has none).
func (s *Source) takeHeld(n int) []*engine.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) == 0 {
		return nil
	}
	n = min(n, len(s.held))
	out := make([]*engine.Delivery, n)
	for i, m := range s.held[:n] {
		m.ID = m.Headers[HeaderScheduledAt]
		out[i] = &engine.Delivery{Message: *m, Token: &token{}}
	}
	s.held = append(s.held[:0], s.held[n:]...)
	return out
}

// Settle: ActAck does nothing; ActRequeue holds the copy in the process; ActDeadLetter XADDs
// the copy to the dead-letter stream. ActLeave and ActDelay are engine.ErrUnsupported. Each
// delivery's copy is taken once, however often the engine sends its settlement.
func (s *Source) Settle(ctx context.Context, batch []engine.Settlement) error {
	var (
		se    engine.SettleError
		pipe  redis.Pipeliner
		cmds  []*redis.StringCmd
		idx   []int
		toks  []*token
		names = "schedule " + s.opts.Pipeline
	)
	for i, st := range batch {
		if st.Delivery == nil {
			se.Add(redisconn.Fault(i, st.Action.String(), names, fmt.Errorf("schedule: settlement without a delivery: %w", engine.ErrPermanent)))
			continue
		}
		tok, _ := st.Delivery.Token.(*token)
		if tok == nil {
			tok = &token{}
			st.Delivery.Token = tok
		}
		if tok.done || st.Action == engine.ActAck {
			tok.done = true
			continue
		}
		switch {
		case st.Copy == nil:
			se.Add(redisconn.Fault(i, st.Action.String(), names, fmt.Errorf("schedule: settle %s without a copy: %w", st.Action, engine.ErrPermanent)))
		case st.Action == engine.ActRequeue:
			s.hold(st.Copy)
			tok.done = true
		case st.Action == engine.ActDeadLetter && s.client != nil:
			if pipe == nil {
				pipe = s.client.Pipeline()
			}
			cmds = append(cmds, pipe.XAdd(ctx, &redis.XAddArgs{Stream: st.DeadLetterKey, Values: codec.StreamFields(st.Copy)}))
			idx, toks = append(idx, i), append(toks, tok)
		default:
			se.Add(redisconn.Fault(i, st.Action.String(), names, fmt.Errorf("schedule: settle %s: %w", st.Action, engine.ErrUnsupported)))
		}
	}
	if pipe != nil {
		err := redisconn.ExecPipe(ctx, pipe)
		for j, c := range cmds {
			if cerr := redisconn.FirstErr(c.Err(), err); cerr != nil {
				se.Add(redisconn.Fault(idx[j], "xadd", fmt.Sprint(c.Args()[1]), cerr, redisconn.SecretsOf(s.client)...))
				continue
			}
			toks[j].done = true
		}
	}
	return se.Err()
}

// Requeue holds runtime copies (retry_after copies that came due) for Receive to hand over.
func (s *Source) Requeue(_ context.Context, msgs []*engine.Message) error {
	s.hold(msgs...)
	return nil
}
