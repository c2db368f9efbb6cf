package engine

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/internal/backoff"
	"github.com/flowrun/flowrun/internal/faultlog"
)

// minSettleBatch is the least a settle call may carry; a pipeline's own bound is its source's
// batch when that is larger (settleBatch).
const minSettleBatch = 512

// settleBatch bounds how many settlements go to a transport in one call, and how many decisions
// wait for the settler: a whole read, since a settle round trip may wait behind a source's long
// reads in Redis (XCLAIM of half a batch takes a millisecond), and with less the workers would
// wait for the settler, and the reads for the workers.
func settleBatch(batch int) int { return max(minSettleBatch, batch) }

// Backoff between resends of settlements that failed transiently.
const (
	settleBackoffBase    = 50 * time.Millisecond
	settleBackoffCeiling = 2 * time.Second
)

// settler is the one goroutine of a pipeline that talks to its source after a read: it batches
// settlements, resends those that failed transiently with backoff, abandons those that failed
// permanently (SPEC §10), and holds runtime delayed copies until due.
type settler struct {
	r     *runner
	stop  context.Context // the stop signal: held copies are written at once after it
	grace context.Context // the end of shutdown_timeout after a stop: give up retrying then
	held  holdHeap
	gate  *holdGate

	max   int          // the most settlements in one call (settleBatch)
	batch []Decision   // decisions to settle in the next call
	buf   []Settlement // the Settle call's argument, reused
	// retry holds decisions whose settlement failed transiently; they are resent at retryAt
	// together with whatever else is waiting, so one failing key never holds back the others.
	retry   []Decision
	retryAt time.Time
	wait    backoff.Doubling // the resends' backoff, before jitter
	failing bool             // a transient failure is being retried (logged once)
	// refused decides which refused emits are logged: one line per command, key and reason per
	// progress interval, never one per message (SPEC §10 "Settlement failures").
	refused *faultlog.Log[faultKey]
}

type faultKey struct{ command, key, reason string }

func newSettler(r *runner, stop, grace context.Context, gate *holdGate, most int) *settler {
	return &settler{r: r, stop: stop, grace: grace, gate: gate, max: most,
		wait:    backoff.Doubling{Base: settleBackoffBase, Max: settleBackoffCeiling},
		refused: faultlog.New[faultKey](refusedInterval(r.e.opts.Progress))}
}

// run consumes decisions until the handoff closes, then writes the held copies: at once after a
// stop signal, else (a finite source ran out) as they come due, for at most shutdown_timeout.
func (s *settler) run(decisions *handoff) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.resetTimer(timer)
		// While many resends wait, take no new decisions: workers block, reading pauses.
		in := decisions.ready
		if len(s.retry) >= s.max {
			in = nil
		}
		select {
		case <-in:
			if s.collect(decisions) {
				s.flushRetries()
				s.finish()
				return
			}
		case <-timer.C:
			now := time.Now()
			if len(s.retry) > 0 && !now.Before(s.retryAt) {
				s.settle()
			}
			s.requeueDue(now)
		case <-s.stop.Done():
			// After the stop, decisions keep arriving from finishing handlers. Held copies go
			// out once decisions closes: reading has stopped then, so a read still blocked at
			// the stop cannot take a copy back in.
			s.drainAfterStop(decisions)
			s.flushRetries()
			s.requeueDue(time.Time{}) // a stop publishes every held copy at once
			return
		}
	}
}

// collect settles every decision waiting in the handoff, in one batch (the handoff holds no
// more than s.max); closed reports that no more come.
func (s *settler) collect(decisions *handoff) (closed bool) {
	s.batch, closed = decisions.take(s.batch)
	if len(s.batch) == 0 {
		return closed
	}
	s.emit(s.batch)
	if len(s.retry) > 0 && time.Now().Before(s.retryAt) {
		// Resends wait for their backoff; new decisions go now, on their own.
		for todo := s.batch; len(todo) > 0; {
			n := min(len(todo), s.max)
			s.settleCall(todo[:n])
			todo = todo[n:]
		}
		clear(s.batch)
		s.batch = s.batch[:0]
		return closed
	}
	s.settle()
	return closed
}

func (s *settler) drainAfterStop(decisions *handoff) {
	for {
		<-decisions.ready
		if s.collect(decisions) {
			return
		}
	}
}

// flushRetries keeps resending what failed transiently until it is settled or the grace period
// ends, then abandons the rest (it stays unsettled, so a source with acknowledgement delivers it
// again).
func (s *settler) flushRetries() {
	for len(s.retry) > 0 {
		if s.grace.Err() != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.settleWith(ctx, s.takeRetries())
			cancel()
			left := s.takeRetries()
			for i := range left {
				s.abandon(&left[i], "settlement abandoned at shutdown")
			}
			return
		}
		t := time.NewTimer(max(time.Until(s.retryAt), 0))
		select {
		case <-t.C:
		case <-s.grace.Done():
		}
		t.Stop()
		s.settleWith(s.grace, s.takeRetries())
	}
}

func (s *settler) takeRetries() []Decision {
	r := s.retry
	s.retry = nil
	return r
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
	if len(s.retry) > 0 {
		d = min(d, max(time.Until(s.retryAt), 0))
	}
	t.Reset(d)
}

// requeueDue writes the held copies due by now; a zero now writes them all. Copies that fail
// transiently stay held and are tried again after a backoff; those that fail permanently, or
// are still unwritten when the grace period is over, are logged as lost.
func (s *settler) requeueDue(now time.Time) {
	var msgs []*Message
	var dues []time.Time
	for len(s.held) > 0 && (now.IsZero() || !s.held[0].due.After(now)) {
		h := heap.Pop(&s.held).(held)
		msgs, dues = append(msgs, h.msg), append(dues, h.due)
	}
	if len(msgs) == 0 {
		return
	}
	popped, written := len(msgs), 0
	wait := settleBackoffBase
	for len(msgs) > 0 {
		ctx := s.grace
		var cancel context.CancelFunc = func() {}
		last := s.grace.Err() != nil
		if last {
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		}
		faults := faultsOf(s.r.p.Source.Requeue(ctx, msgs), len(msgs))
		cancel()
		written += len(msgs) - len(faults)
		var again []*Message
		var againDue []time.Time
		for _, f := range faults {
			s.r.metrics.SettleFailure(f.Reason)
			m := msgs[f.Index]
			if f.Permanent || last {
				s.r.log.Error().Err(f).Str(FieldKey, m.Key).Msg("delayed copy lost: it could not be written")
				continue
			}
			again, againDue = append(again, m), append(againDue, dues[f.Index])
		}
		if len(again) == 0 {
			break
		}
		if now.IsZero() {
			// A stop writes everything now: keep trying until the grace period ends.
			s.r.log.Warn().Err(faults[0]).Int("copies", len(again)).Msg("writing delayed copies failed; retrying with backoff")
			sleep(s.grace, rand.N(wait)+wait/2)
			wait = min(wait*2, settleBackoffCeiling)
			msgs, dues = again, againDue
			continue
		}
		// Not a stop: hold them a little longer and go on settling meanwhile.
		retryAt := time.Now().Add(s.backoff())
		for _, m := range again {
			heap.Push(&s.held, held{msg: m, due: retryAt})
		}
		popped -= len(again)
		s.noteFailing(faults[0], "writing delayed copies")
		break
	}
	s.gate.add(-popped)
	s.r.tally.copies.Add(int64(written))
	s.r.metrics.DelayedHeld(len(s.held))
}

// settle sends the batch and every resend that is due, in calls of at most s.max.
func (s *settler) settle() {
	todo := s.batch // settled in place when nothing waits for a resend: no copy per batch
	if len(s.retry) > 0 {
		todo = append(s.takeRetries(), s.batch...)
	}
	for len(todo) > 0 {
		n := min(len(todo), s.max)
		s.settleCall(todo[:n])
		todo = todo[n:]
	}
	clear(s.batch)
	s.batch = s.batch[:0]
}

func (s *settler) settleCall(decs []Decision) { s.settleWith(s.grace, decs) }

// settleWith sends decs in one Settle call and sorts out what failed.
func (s *settler) settleWith(ctx context.Context, decs []Decision) {
	if len(decs) == 0 {
		return
	}
	batch := s.buf[:0]
	for _, d := range decs {
		batch = append(batch, d.Settlement)
	}
	defer func() { // kept for the next call; what it points to is not
		clear(batch)
		s.buf = batch[:0]
	}()
	ends := settleSpans(decs)
	err := s.r.p.Source.Settle(ctx, batch)
	faults := faultsOf(err, len(decs))
	endSpans(ends, faults)
	if err == nil {
		s.settled(decs)
		return
	}
	failed := make([]bool, len(decs))
	var permanent []int
	for _, f := range faults {
		if failed[f.Index] {
			continue
		}
		failed[f.Index] = true
		if f.Permanent {
			permanent = append(permanent, f.Index)
			continue
		}
		s.r.metrics.SettleFailure(f.Reason)
		s.toRetry(&decs[f.Index], f)
	}
	ok := decs[:0:0]
	for i, d := range decs {
		if !failed[i] {
			ok = append(ok, d)
		}
	}
	s.settled(ok)
	if len(permanent) == 0 {
		return
	}
	if len(decs) > 1 && len(permanent) > 1 {
		// The transport could not tell which delivery was at fault (a whole MULTI aborted):
		// send each alone, so only the one that cannot be settled is left unsettled.
		for _, i := range permanent {
			s.settleWith(ctx, decs[i:i+1])
		}
		return
	}
	for _, f := range faults {
		if f.Permanent && failed[f.Index] {
			failed[f.Index] = false // once per delivery
			s.r.metrics.SettleFailure(f.Reason)
			s.logPermanent(&decs[f.Index], f)
			s.abandon(&decs[f.Index], "")
		}
	}
}

// settled is called for decisions the source carried out: their held copies start waiting.
func (s *settler) settled(decs []Decision) {
	if s.failing && len(decs) > 0 && len(s.retry) == 0 {
		s.failing = false
		s.wait.Reset()
		s.r.log.Info().Msg("settlement recovered")
	}
	pushed, dead := false, false
	for i := range decs {
		d := &decs[i]
		switch d.Settlement.Action {
		case ActRequeue, ActDelay:
			s.r.tally.copies.Add(1)
		case ActDeadLetter:
			s.r.tally.dead.Add(1)
			dead = true
		}
		if d.Hold != nil {
			// The original is settled before its copy is held (SPEC §5 runtime delay).
			heap.Push(&s.held, held{msg: d.Hold, due: d.HoldDue})
			pushed = true
		}
		if d.Span != nil {
			d.Span.End(d.Label.String(), nil)
		}
	}
	if pushed {
		s.r.metrics.DelayedHeld(len(s.held))
	}
	if hook := s.r.e.opts.DeadLettered; dead && hook != nil {
		hook(s.r.p.Name)
	}
}

// toRetry queues a transiently failed decision for a resend after the backoff.
func (s *settler) toRetry(d *Decision, f Fault) {
	if len(s.retry) == 0 {
		s.retryAt = time.Now().Add(s.backoff())
	}
	s.retry = append(s.retry, *d)
	s.noteFailing(f, "settle")
}

func (s *settler) backoff() time.Duration {
	w := s.wait.Fail()
	return rand.N(w) + w/2
}

func (s *settler) noteFailing(f Fault, what string) {
	s.r.metrics.SourceError()
	if s.failing {
		return
	}
	s.failing = true
	s.r.log.Warn().Err(f).Str("command", f.Command).Str(FieldKey, f.Key).Str("reason", f.Reason).
		Msg(what + " failed; retrying with backoff")
}

// logPermanent logs a permanent fault at error once per command, key and reason.
func (s *settler) logPermanent(d *Decision, f Fault) {
	ev, first := s.r.permanentEvent(f, d.Settlement.Delivery)
	if !first {
		ev.Str("action", d.Settlement.Action.String()).Msg("settlement failed permanently")
		return
	}
	ev.Str("action", d.Settlement.Action.String()).
		Msg("settlement failed permanently: delivery left unsettled, it comes back by its source's rules; the rest of the pipeline goes on")
}

// abandon gives up on a decision, logging msg at error unless it is "" (runner.leaveUnsettled).
func (s *settler) abandon(d *Decision, msg string) {
	if msg != "" {
		withDelivery(s.r.log.Error(), d.Settlement.Delivery).Str("action", d.Settlement.Action.String()).Msg(msg)
	}
	s.r.leaveUnsettled(d)
}

// permanentEvent is the event that logs a permanent fault of a settlement or a flow-control
// store round for delivery d (nil: none): at error with the fault's command, key and reason the
// first time of each for the life of the pipeline, at debug after that (SPEC §10). The settler
// and flow control note their faults in the one log, runner.permanent.
func (r *runner) permanentEvent(f Fault, d *Delivery) (ev *zerolog.Event, first bool) {
	if first, _ := r.permanent.Note(faultKey{f.Command, f.Key, f.Reason}, time.Now()); !first {
		return withDelivery(r.log.Debug().Err(f), d), false
	}
	return withDelivery(r.log.Error().Err(f.Err).Str("command", f.Command).Str(FieldKey, f.Key).Str("reason", f.Reason), d), true
}

func withDelivery(ev *zerolog.Event, d *Delivery) *zerolog.Event {
	if d != nil {
		ev = ev.Str("source_key", d.Key)
		if d.ID != "" {
			ev = ev.Str(FieldID, d.ID)
		}
	}
	return ev
}

// leaveUnsettled gives up on a decision after a permanent failure (of its settlement, or of the
// flow-control mark that goes before it): the source forgets it, so its own rules bring it back,
// and its held copy, if any, is never written.
func (r *runner) leaveUnsettled(d *Decision) {
	if d.Hold != nil {
		r.gate.add(-1)
	}
	if d.Span != nil {
		d.Span.End(d.Label.String(), errAbandoned)
	}
	if rel, ok := r.p.Source.(Releaser); ok && d.Settlement.Delivery != nil {
		rel.Release(d.Settlement)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
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

// errAbandoned marks the consumer span of a delivery whose settlement was given up.
var errAbandoned = errors.New("settlement failed; delivery left unsettled")

// settleSpans begins a settlement span per traced decision (the copies it writes then carry
// that span's traceparent) and returns their ends, by decision; nil when none is traced.
func settleSpans(decs []Decision) []func(error) {
	var ends []func(error)
	for i := range decs {
		d := &decs[i]
		if d.Span == nil {
			continue
		}
		if ends == nil {
			ends = make([]func(error), len(decs))
		}
		st := d.Settlement
		switch {
		case st.Copy != nil && d.Hold != nil:
			ends[i] = d.Span.Settle(st.Action, st.Copy, d.Hold)
		case st.Copy != nil:
			ends[i] = d.Span.Settle(st.Action, st.Copy)
		case d.Hold != nil:
			ends[i] = d.Span.Settle(st.Action, d.Hold)
		default:
			ends[i] = d.Span.Settle(st.Action)
		}
	}
	return ends
}
