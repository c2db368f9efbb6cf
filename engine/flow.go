package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Flow-control polling: a delivery that waits for a key held in another process is tried again
// after flowPollMin, doubling to flowPollMax while nothing changes (there is no control plane
// to say when a key frees). A release in this process tries again at once.
const (
	flowPollMin = 2 * time.Millisecond
	flowPollMax = 50 * time.Millisecond
	// A whole store round that failed is sent again after flowRetryMin, doubling up to
	// flowRetryMax while it keeps failing.
	flowRetryMin = 200 * time.Millisecond
	flowRetryMax = 5 * time.Second
	// flowMaxRound bounds the admissions, releases and renewals of one store round.
	flowMaxRound = 512
	// flowMaxHandoff bounds how often a lease passes to the next delivery of its key in this
	// process before it is released and taken again.
	flowMaxHandoff = 32
	// flowMaxLinger bounds how long a throttled gate waits for more free handlers before a
	// round (see flowState.linger).
	flowMaxLinger = 2 * time.Millisecond
	// A throttle's start slack is its period / flowSlackDiv, used when at least flowMinSlack;
	// with it a round may admit flowExtra times as many deliveries as there are handlers
	// beyond the free ones (see newFlowState).
	flowSlackDiv = 32
	flowMinSlack = time.Millisecond
	flowExtra    = 3
)

// flowGate is flow control as the admission step of a pipeline's Queue (SPEC §13). A pushed
// delivery's keys are computed on the pushing goroutine; it then waits in the queue, parked and
// still counting against the read-ahead bound, until a store round admits it, and workers take
// only admitted deliveries. A finished delivery comes back through done: its lease is released
// (its dedupe claim marked done or deleted) in the next round, together with the next
// admissions. With dedupe, its decision goes to the settler only then, so a key is marked done
// before its delivery is acknowledged; without, at once.
//
// One admission loop goroutine sends the rounds, rather than Take or done: a round trip must
// not hold a worker (the handlers it would start wait for it), and polling a busy key, renewing
// leases and backing off a failed store need a clock that no Take or finish provides. When every
// worker is idle, a push sends the round for its deliveries itself and runs the admitted ones
// inline (Queue.SetInline), as it does without flow control. The state is under the queue's
// lock, which no one holds across a round trip; busy marks the round out, one at a time.
type flowGate struct {
	r         *runner
	q         *Queue
	store     FlowStore
	returner  Returner
	decisions *handoff
	grace     context.Context
	prefix    string
	seq       atomic.Uint64

	// Guarded by q.mu.
	st        *flowState
	wake      sync.Cond // the loop waits here for something to do
	idle      sync.Cond // a push waits here for the round out to end
	dirty     bool      // something changed since the loop last looked
	busy      bool      // a round is out, or the loop is between its steps
	graceOver bool
	abandoned bool // the end of the grace period was acted on
	ending    bool // every worker has returned (finish)
	ended     bool // the loop has returned

	// loopActs and pushActs are the loop's and the pushing goroutine's flowActs, reused.
	loopActs, pushActs flowActs

	timer    *time.Timer // wakes the loop for a poll, a renewal or the end of a backoff
	unhook   []func() bool
	loopDone sync.WaitGroup
}

// newFlowGate sets flow control up as q's admission step and starts its loop.
func newFlowGate(r *runner, f *Flow, q *Queue, returner Returner, decisions *handoff, stop, grace context.Context) *flowGate {
	var b [6]byte
	_, _ = rand.Read(b[:])
	if f.Store == nil {
		f.Store = NewMemFlowStore()
	}
	g := &flowGate{
		r: r, q: q, store: f.Store, returner: returner, decisions: decisions, grace: grace,
		prefix: hex.EncodeToString(b[:]) + ":",
		st:     newFlowState(f, &r.policy, r.p.Concurrency, q.limit),
	}
	g.wake.L, g.idle.L = &q.mu, &q.mu
	g.timer = time.AfterFunc(time.Hour, func() { g.kick(nil) })
	g.unhook = []func() bool{
		context.AfterFunc(stop, func() { g.kick(func() { g.st.stopped = true }) }),
		context.AfterFunc(grace, func() {
			g.kick(func() {
				g.graceOver = true
				q.ready.Broadcast() // the workers end
			})
		}),
	}
	q.flow = g
	g.loopDone.Add(1)
	go g.loop()
	return g
}

// kick runs change (when not nil) under the queue's lock and wakes the loop.
func (g *flowGate) kick(change func()) {
	g.q.mu.Lock()
	if change != nil {
		change()
	}
	g.kickLocked()
	g.q.mu.Unlock()
}

func (g *flowGate) kickLocked() {
	g.dirty = true
	g.wake.Signal()
}

// done hands a finished delivery's decision back (a worker, or an inline push).
func (g *flowGate) done(d *Delivery, dec *Decision) { g.finished(flowDone{d: d, dec: *dec}) }

// doneAll hands a push's decisions back, each as done does.
func (g *flowGate) doneAll(ds []*Delivery, decs []Decision) {
	for i := range decs {
		g.done(ds[i], &decs[i])
	}
}

// returned notes an admitted delivery that was handed back to the source unrun.
func (g *flowGate) returned(d *Delivery) { g.finished(flowDone{d: d, returned: true}) }

func (g *flowGate) finished(fd flowDone) {
	q := g.q
	q.mu.Lock()
	var now time.Time
	if g.st.clocked() {
		now = time.Now()
	}
	pass, next := g.st.finished(fd, now, g.busy)
	if next != nil {
		q.admitLocked([]*Delivery{next})
	}
	g.kickLocked()
	q.mu.Unlock()
	if pass {
		g.decisions.put(&fd.dec)
	}
}

// finish is called once every worker has returned; it returns once the last releases are sent
// and every decision passed on.
func (g *flowGate) finish() {
	g.kick(func() { g.ending = true })
	g.loopDone.Wait()
}

// lateLocked is the queue's check of an admitted delivery a worker takes: a throttled one past
// its start deadline goes back to the wait, unrun (true).
func (g *flowGate) lateLocked(d *Delivery) bool {
	if g.st.slack == 0 {
		return false
	}
	t := g.st.running[d]
	if t == nil || t.by.IsZero() || time.Until(t.by) >= 0 { // the monotonic clock alone
		return false
	}
	g.st.late(d)
	g.q.held++
	g.kickLocked()
	return true
}

// workersDoneLocked reports whether workers find nothing more once the queue is empty: it is
// closed and nothing waits, or the grace period is over.
func (g *flowGate) workersDoneLocked() bool {
	return g.q.closed && len(g.st.parked) == 0 || g.graceOver
}

// push is the queue's Push under flow control: it waits for room, computes the keys (prepare),
// parks the deliveries, and when every worker is idle sends their round itself and runs them
// inline.
func (g *flowGate) push(ctx context.Context, ds []*Delivery) bool {
	q := g.q
	q.mu.Lock()
	if !q.waitRoomLocked(ctx) {
		q.mu.Unlock()
		return false
	}
	q.held += len(ds)
	q.mu.Unlock()
	ws := g.prepare(ds)
	q.mu.Lock()
	defer q.mu.Unlock()
	g.st.park(ws)
	if g.ended {
		// No worker is left to run them (the grace period is over).
		g.returnParkedLocked()
		g.abandonParkedLocked()
		return true
	}
	if !g.inlineLocked(len(ds), len(ws)) {
		g.kickLocked()
		return true
	}
	g.busy = true
	acts := &g.pushActs
	defer acts.reset()
	ok := g.roundLocked(true, acts)
	g.busy = false
	g.idle.Broadcast()
	g.kickLocked() // the loop sets its clocks by the round
	if !ok {
		return true
	}
	run := 0
	if len(g.st.parked) == 0 {
		// All of the push is decided or admitted: no worker can start one of it meanwhile, so
		// running them here keeps within concurrency.
		run = len(acts.start)
	}
	q.admitLocked(acts.start[run:])
	q.mu.Unlock()
	g.carry(acts)
	n := 0
	if run > 0 {
		n = q.inline(acts.start[:run])
	}
	q.mu.Lock()
	q.unholdLocked(n)
	q.admitLocked(acts.start[n:run]) // what inline did not run goes to the workers
	return true
}

// inlineLocked reports whether a push of n deliveries, of which parked wait, may have their
// round sent and be run on the pushing goroutine: inline is on, the push is small, nothing else
// waits, every worker is idle, and no stop or backoff holds admissions back. It waits for a
// round out to end first.
func (g *flowGate) inlineLocked(n, parked int) bool {
	q := g.q
	for {
		if q.inline == nil || n > inlineMax || parked == 0 || len(g.st.parked) != parked || q.len() > 0 ||
			q.waiting != q.workers || q.closed || g.st.stopped || g.ending || time.Now().Before(g.st.retryAt) {
			return false
		}
		if !g.busy {
			return true
		}
		g.idle.Wait()
	}
}

// prepare computes the keys of pushed deliveries (the pushing goroutine, in read order) and
// returns those that wait for an admission; the others are decided here, without a handler:
// past the attempt cap (dead-lettered without waiting for a key), or a key that cannot be
// computed (retry, SPEC §13).
func (g *flowGate) prepare(ds []*Delivery) []*flowWait {
	ws := make([]*flowWait, 0, len(ds))
	decided := 0
	now := time.Now() // one clock reading for the push: its deliveries were read together
	// A throttle alone holds nothing a token would name (FlowLease.Token).
	tokens := g.st.f.Dedupe != nil || g.st.f.Concurrency != nil
	pol := &g.r.policy
	for _, d := range ds {
		if d.Headers == nil {
			d.Headers = map[string]string{}
		}
		pol.Caps.Number(d)
		var dec Decision
		var err error
		if pol.pastCap(d) {
			dec, _ = pol.Before(d, now)
		} else {
			var a FlowAdmit
			prefix, seq := "", uint64(0)
			if tokens {
				prefix, seq = g.prefix, g.seq.Add(1)
			}
			if a, err = flowAdmitSeq(g.st.f, g.st.slack, prefix, seq, tokens, d); err == nil {
				ws = append(ws, &flowWait{d: d, admit: a, ask: -1})
				continue
			}
			err = fmt.Errorf("flow control: %w", err)
			dec = pol.Decide(d, Retry(), err, now)
			dec.Cause = err
		}
		g.r.tally.read.Add(1)
		g.r.logDecision(d, &dec, err)
		decided++
		g.decisions.put(&dec)
	}
	g.q.Unhold(decided)
	return ws
}

// loop sends the rounds until every worker has returned, then the last releases (drain).
func (g *flowGate) loop() {
	defer g.loopDone.Done()
	q := g.q
	q.mu.Lock()
	for {
		for !g.dirty {
			g.wake.Wait()
		}
		g.dirty = false
		if g.ending {
			break
		}
		for g.busy {
			g.idle.Wait()
		}
		g.busy = true
		wait := g.stepLocked()
		g.busy = false
		g.idle.Broadcast()
		g.timer.Reset(wait)
	}
	q.mu.Unlock()
	g.drain()
}

// stepLocked is one turn of the loop: at a stop it hands what waits back to the source, at the
// end of the grace period it gives up on it; then it sends a round when there is work and no
// backoff or linger holds it back. It returns how long the loop may sleep before it looks
// again, unless woken.
func (g *flowGate) stepLocked() time.Duration {
	q, st := g.q, g.st
	if st.stopped && g.returner != nil {
		g.returnParkedLocked()
	}
	if g.graceOver && !g.abandoned {
		g.abandoned = true
		g.returnParkedLocked()
		g.abandonParkedLocked()
	}
	admitting := !g.graceOver && !(st.stopped && g.returner != nil)
	now := time.Now()
	work := len(st.releases) > 0 || admitting && st.wantsAdmit() || st.renewDue(now)
	wait, backingOff := time.Hour, false
	if l := st.linger(now, admitting); l > 0 {
		wait = l
	} else if d := st.retryAt.Sub(now); work && d > 0 {
		// A failed round is not sent again before its backoff, whatever woke the loop.
		wait, backingOff = d, true
	} else if work {
		acts := &g.loopActs
		ok := g.roundLocked(admitting, acts)
		if ok {
			q.admitLocked(acts.start)
			q.mu.Unlock()
			g.carry(acts)
			q.mu.Lock()
		}
		acts.reset()
		switch {
		case !ok:
			wait = st.retry.Wait()
		case len(st.releases) > 0:
			wait = 0 // admissions that failed for good release what they may have taken
		case admitting && st.wantsAdmit():
			wait = st.nextPoll()
		}
	}
	if q.len() == 0 && g.workersDoneLocked() {
		q.ready.Broadcast()
	}
	if !st.renewAt.IsZero() && !backingOff {
		wait = min(wait, max(time.Until(st.renewAt), 0))
	}
	return wait
}

// roundLocked sends one store round: releases, due renewals and, when admit, admissions. The
// queue's lock is held on entry and on return, not across the round trip; the caller holds
// busy. ok reports whether the store answered (a round with nothing to send is answered); what
// its answer asks goes into acts, for the caller to carry out and start.
func (g *flowGate) roundLocked(admit bool, acts *flowActs) (ok bool) {
	sent := time.Now()
	req := g.st.request(sent, admit)
	if req.empty() {
		return true
	}
	g.q.mu.Unlock()
	err := g.store.Round(g.grace, req.r)
	now := time.Now()
	g.q.mu.Lock()
	if err != nil {
		for _, w := range g.st.parked {
			w.ask = -1
		}
		first := g.st.roundFailed(now)
		g.q.mu.Unlock()
		g.roundFailed(err, first)
		g.q.mu.Lock()
		return false
	}
	if g.st.roundDone(sent, now) {
		g.r.log.Info().Msg("flow control: store recovered")
	}
	g.st.apply(req, sent, now, acts)
	g.q.unholdLocked(acts.unheld())
	return true
}

// roundFailed counts and logs (once in a run of failures) a round the store did not answer.
func (g *flowGate) roundFailed(err error, first bool) {
	g.r.metrics.SourceError()
	if !first {
		return
	}
	ev := g.r.log.Warn()
	var f Fault
	if errors.As(err, &f) {
		if f.Permanent {
			ev = g.r.log.Error()
		}
		ev = ev.Str("reason", f.Reason)
	}
	ev.Err(err).Msg("flow control: store round failed; retrying with backoff")
}

// carry carries out what a round's answer asks (flowActs), outside the queue's lock.
func (g *flowGate) carry(a *flowActs) {
	r := g.r
	for _, f := range a.faults {
		r.metrics.SettleFailure(f.fl[0].Reason)
		for _, x := range f.fl {
			ev, _ := r.permanentEvent(x, f.d)
			ev.Msg(f.msg)
		}
	}
	for _, d := range a.lost {
		r.log.Warn().Str(FieldKey, d.Key).Str(FieldID, d.ID).
			Msg("flow control: a running delivery's lease expired before it was renewed; its key may run twice")
	}
	for _, x := range a.failed {
		r.tally.read.Add(1)
		r.logDecision(x.d, &x.dec, x.err)
	}
	for _, d := range a.dups {
		r.tally.read.Add(1)
		dec := Decision{Settlement: Settlement{Delivery: d, Action: ActAck}, Label: OutcomeDuplicate}
		r.logDecision(d, &dec, nil)
		g.decisions.put(&dec)
	}
	for i := range a.unsettled {
		r.leaveUnsettled(&a.unsettled[i])
	}
	g.decisions.putAll(a.pass)
}

// returnParkedLocked hands every waiting delivery back to the source (at a stop).
func (g *flowGate) returnParkedLocked() {
	if g.returner == nil || len(g.st.parked) == 0 {
		return
	}
	ds := g.st.takeParked()
	g.q.mu.Unlock()
	g.returner.Return(ds)
	g.q.mu.Lock()
	g.q.unholdLocked(len(ds))
}

// abandonParkedLocked gives up on what still waits when the grace period is over: a source with
// acknowledgement delivers it again.
func (g *flowGate) abandonParkedLocked() {
	for _, w := range g.st.parked {
		g.r.log.Error().Str(FieldKey, w.d.Key).Str(FieldID, w.d.ID).Msg("flow control: waiting delivery abandoned at shutdown")
	}
	g.q.unholdLocked(len(g.st.takeParked()))
}

// drain sends the last releases once every worker has returned, until they are sent or the
// grace period is over; then the decisions left go on, and what still waits is handed back or
// abandoned.
func (g *flowGate) drain() {
	q := g.q
	q.mu.Lock()
	g.busy = true
	g.returnParkedLocked()
	for len(g.st.releases) > 0 {
		acts := &g.loopActs
		if g.roundLocked(false, acts) {
			q.mu.Unlock()
			g.carry(acts)
			q.mu.Lock()
			acts.reset()
			continue
		}
		if g.grace.Err() != nil {
			pass, unsettled := g.st.flushUnreleased()
			q.mu.Unlock()
			g.flush(pass, unsettled)
			q.mu.Lock()
			break
		}
		q.mu.Unlock()
		sleep(g.grace, g.st.retry.Wait())
		q.mu.Lock()
	}
	g.abandonParkedLocked()
	g.ended = true
	g.busy = false
	g.idle.Broadcast()
	q.mu.Unlock()
	g.timer.Stop()
	for _, u := range g.unhook {
		u()
	}
}

// flush passes on the decisions whose leases were not released by the end of the grace period
// and leaves unsettled those whose dedupe key was not marked done (flowState.flushUnreleased).
func (g *flowGate) flush(pass, unsettled []flowDone) {
	for _, fd := range unsettled {
		g.r.log.Error().Str(FieldKey, fd.d.Key).Str(FieldID, fd.d.ID).
			Msg("flow control: dedupe key not marked done by the end of the grace period: delivery left unsettled, it comes back by its source's rules")
		g.r.leaveUnsettled(&fd.dec)
	}
	for i := range pass {
		g.decisions.put(&pass[i].dec)
	}
}
