package engine

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// maxSettleBatch bounds how many settlements go to a transport in one call.
const maxSettleBatch = 512

// settler is the one goroutine of a pipeline that talks to its source after a read: it batches
// settlements, retries failed ones with backoff, and holds runtime delayed copies until due.
type settler struct {
	r     *runner
	stop  context.Context // the stop signal: held copies are written at once after it
	grace context.Context // the end of shutdown_timeout after a stop: give up retrying then
	held  holdHeap
	batch []Settlement
}

func newSettler(r *runner, stop, grace context.Context) *settler {
	return &settler{r: r, stop: stop, grace: grace}
}

// run consumes decisions until the channel closes, then writes the held copies: at once after a
// stop signal, else (a finite source ran out) as they come due, for at most shutdown_timeout.
func (s *settler) run(decisions <-chan Decision) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.resetTimer(timer)
		select {
		case dec, ok := <-decisions:
			if !ok {
				s.finish()
				return
			}
			s.collect(dec, decisions)
		case <-timer.C:
			s.requeueDue(time.Now())
		case <-s.stop.Done():
			// After the stop, decisions keep arriving from finishing handlers. Held copies go
			// out once decisions closes: reading has stopped then, so a read still blocked at
			// the stop cannot take a copy back in.
			s.drainAfterStop(decisions)
			s.requeueDue(time.Time{}) // a stop publishes every held copy at once
			return
		}
	}
}

// collect settles dec together with whatever else is already waiting.
func (s *settler) collect(dec Decision, decisions <-chan Decision) {
	var holds []Decision
	add := func(d Decision) {
		s.batch = append(s.batch, d.Settlement)
		if d.Hold != nil {
			holds = append(holds, d)
		}
	}
	add(dec)
more:
	for len(s.batch) < maxSettleBatch {
		select {
		case d, ok := <-decisions:
			if !ok {
				break more
			}
			add(d)
		default:
			break more
		}
	}
	s.settle()
	// The original is settled before its copy is held (SPEC §5 runtime delay).
	for _, d := range holds {
		heap.Push(&s.held, held{msg: d.Hold, due: d.HoldDue})
	}
	s.r.metrics.DelayedHeld(len(s.held))
}

func (s *settler) drainAfterStop(decisions <-chan Decision) {
	for dec := range decisions {
		s.collect(dec, decisions)
	}
}

func (s *settler) finish() {
	if len(s.held) > 0 && s.stop.Err() == nil {
		deadline := time.NewTimer(s.r.p.ShutdownTimeout)
		defer deadline.Stop()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
	wait:
		for len(s.held) > 0 {
			s.resetTimer(timer)
			select {
			case <-timer.C:
				s.requeueDue(time.Now())
			case <-deadline.C:
				break wait
			case <-s.stop.Done():
				break wait
			}
		}
	}
	s.requeueDue(time.Time{})
}

func (s *settler) resetTimer(t *time.Timer) {
	d := time.Hour
	if len(s.held) > 0 {
		d = max(time.Until(s.held[0].due), 0)
	}
	t.Reset(d)
}

// requeueDue writes the held copies due by now; a zero now writes them all.
func (s *settler) requeueDue(now time.Time) {
	var msgs []*Message
	for len(s.held) > 0 && (now.IsZero() || !s.held[0].due.After(now)) {
		msgs = append(msgs, heap.Pop(&s.held).(held).msg)
	}
	if len(msgs) == 0 {
		return
	}
	err := s.retry("requeue delayed copies", func(ctx context.Context) error {
		return s.r.p.Source.Requeue(ctx, msgs)
	})
	if err != nil {
		for _, m := range msgs {
			s.r.log.Error().Err(err).Str(FieldKey, m.Key).Msg("delayed copy lost: could not be written before shutdown")
		}
	}
	s.r.metrics.DelayedHeld(len(s.held))
}

func (s *settler) settle() {
	if len(s.batch) == 0 {
		return
	}
	todo := s.batch
	err := s.retry("settle", func(ctx context.Context) error {
		err := s.r.p.Source.Settle(ctx, todo)
		var pe PartialError
		if errors.As(err, &pe) {
			todo = pick(todo, pe.FailedIndexes())
		}
		return err
	})
	if err != nil {
		// Not acknowledged: a source with acknowledgement delivers these again.
		s.r.log.Error().Err(err).Int("deliveries", len(todo)).Msg("settlement abandoned at shutdown")
	}
	clear(s.batch)
	s.batch = s.batch[:0]
}

// retry calls f until it succeeds, backing off between failures, until the grace period ends;
// then it makes one last bounded attempt.
func (s *settler) retry(what string, f func(ctx context.Context) error) error {
	const (
		base    = 50 * time.Millisecond
		ceiling = 5 * time.Second
	)
	wait := base
	failing := false
	for {
		if s.grace.Err() != nil {
			// The grace period is over (or ran out while we waited): one bounded last try.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return f(ctx)
		}
		err := f(s.grace)
		if err == nil {
			if failing {
				s.r.log.Info().Msg(what + " recovered")
			}
			return nil
		}
		s.r.metrics.SourceError()
		if !failing {
			s.r.log.Warn().Err(err).Msg(what + " failed; retrying with backoff")
			failing = true
		}
		t := time.NewTimer(rand.N(wait) + wait/2)
		select {
		case <-t.C:
		case <-s.grace.Done():
		}
		t.Stop()
		wait = min(wait*2, ceiling)
	}
}

// pick returns the settlements at the given indexes, in a new slice.
func pick(batch []Settlement, idx []int) []Settlement {
	out := make([]Settlement, 0, len(idx))
	for _, i := range idx {
		if i >= 0 && i < len(batch) {
			out = append(out, batch[i])
		}
	}
	return out
}

type held struct {
	msg *Message
	due time.Time
}

type holdHeap []held

func (h holdHeap) Len() int           { return len(h) }
func (h holdHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h holdHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *holdHeap) Push(x any)        { *h = append(*h, x.(held)) }
func (h *holdHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
