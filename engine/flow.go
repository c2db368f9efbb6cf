package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/flowrun/flowrun/internal/backoff"
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
	// flowMaxLinger bounds how long a throttled stage waits for more free handlers before a
	// round (see flowStage.linger).
	flowMaxLinger = 2 * time.Millisecond
	// A throttle's start slack is its period / flowSlackDiv, used when at least flowMinSlack;
	// with it a round may admit flowExtra times as many deliveries as there are handlers
	// beyond the free ones (see newFlowStage).
	flowSlackDiv = 32
	flowMinSlack = time.Millisecond
	flowExtra    = 3
)

// flowStage sits between the queue and the handler slots (SPEC §13). It takes deliveries from
// the queue (they go on counting against the read-ahead bound while they wait), computes their
// keys, and asks the store in batched rounds which may start; admitted ones go to the workers.
// Finished deliveries come back to it: their leases are released (dedupe claims marked done or
// deleted) in the next round, together with the next admissions. With dedupe, the decision
// goes to the settler only then, so a key is marked done before its delivery is acknowledged;
// without, at once. The pump goroutine computes keys (prepare) while the stage is in a round.
type flowStage struct {
	r         *runner
	f         *Flow
	q         *Queue
	returner  Returner
	decisions chan<- Decision
	lease     time.Duration

	in       chan []*flowWait // from the pump: taken from the queue, held, keys computed
	admitted chan flowStart   // to the workers
	finished chan flowDone    // from the workers
	finishC  chan struct{}    // closed by finish: workers are done
	doneC    chan struct{}    // closed when run returns

	// Owned by run.
	parked  []*flowWait
	running map[*Delivery]*flowTicket // admitted, not yet released
	// The keys running deliveries of this process hold: concurrency keys counted, dedupe
	// claims.
	localConc   map[string]int
	localDedupe map[string]bool
	releases    []flowDone
	slots       int // admissions that may be granted now (newFlowStage) minus those not yet finished
	prefix      string
	seq         uint64
	closedIn    bool
	stopped     bool
	failing     bool      // the store fails whole rounds (logged once)
	retryAt     time.Time // no round is sent before then (the backoff after a failed one)
	// retry grows with the whole rounds failed in a row: from flowRetryMin, doubling up to
	// flowRetryMax (a store down for minutes is asked every few seconds, not five times a
	// second), and at most a quarter of the lease, so that once the store is back the leases of
	// running deliveries are renewed well before they expire.
	retry   backoff.Doubling
	poll    time.Duration
	renewAt time.Time
	// A throttled stage sends no admission round before admitAt unless every handler is free
	// (see linger); rtt is the last round's duration.
	admitAt time.Time
	rtt     time.Duration
	// slack is how late after its round was sent a throttled delivery may still start; 0:
	// a throttle admits only for free handlers (see newFlowStage).
	slack time.Duration
	// unstarted counts admitted deliveries no worker has taken yet (a late one comes back).
	unstarted atomic.Int64
	// took averages how long admitted deliveries took to finish (waiting for a handler
	// included): the extra admissions are made only while it is well within the slack.
	took time.Duration
}

// flowStart is an admitted delivery on its way to a worker; with a throttle slack, by is the
// latest it may start.
type flowStart struct {
	d  *Delivery
	by time.Time
}

type flowWait struct {
	d     *Delivery
	admit FlowAdmit
	ask   int  // its index in this round's admissions; -1 when not asked
	again bool // admitted, but too late to start: it holds its leases and asks for a start
}

type flowTicket struct {
	at       time.Time // admitted
	lease    FlowLease
	admit    FlowAdmit // what it was admitted with (a late start asks for its throttle again)
	handoffs int       // times the lease passed from one delivery of its key to the next
}

type flowDone struct {
	d        *Delivery
	dec      Decision
	returned bool // handed back to the source at a stop, never run
	passed   bool // its decision went to the settler already
	late     bool // taken by a worker after its start deadline, not run
	failed   bool // its admission failed permanently (logged and counted then), never run
}

func newFlowStage(r *runner, f *Flow, q *Queue, returner Returner, decisions chan<- Decision) *flowStage {
	var b [6]byte
	_, _ = rand.Read(b[:])
	lease := f.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
	if f.Store == nil {
		f.Store = NewMemFlowStore()
	}
	c := r.p.Concurrency
	// Admissions a round may grant: the free handler slots, plus, without a throttle, every
	// delivery the queue may hold, so that one round admits a whole batch (a lease or claim
	// taken a little before its handler starts only errs on the safe side). A throttle counts
	// a start when it admits, and a start counted well before its handler starts would let
	// more than limit start in some period. So a throttle admits for the free handlers and
	// for up to three times as many more, which start as handlers free, each only within a
	// slack (period/32) after its round was sent; and the store counts the window over period
	// + slack. Then no period holds more than limit starts: any two starts within a period were
	// admitted within period + slack of each other, so the later admission saw the earlier
	// one. The throttle errs, by at most a 32nd, on the strict side. A delivery that misses its
	// slack does not start: it asks again, its first start still counted; so the extra
	// admissions are made only while deliveries finish well within the slack (fast handlers,
	// where round trips rather than handlers bound the rate). With a period too short for a
	// useful slack (under 32ms), only the free handlers.
	slots, slack := c+q.limit, time.Duration(0)
	if f.Throttle != nil {
		slots = c
		if s := f.Throttle.Period / flowSlackDiv; s >= flowMinSlack {
			slots, slack = (1+flowExtra)*c, s
		}
	}
	return &flowStage{
		r: r, f: f, q: q, returner: returner, decisions: decisions, lease: lease, slack: slack,
		in:          make(chan []*flowWait, 1),
		admitted:    make(chan flowStart, slots),
		finished:    make(chan flowDone, slots), // workers never wait for a round
		finishC:     make(chan struct{}),
		doneC:       make(chan struct{}),
		running:     map[*Delivery]*flowTicket{},
		localConc:   map[string]int{},
		localDedupe: map[string]bool{},
		retry:       backoff.Doubling{Base: flowRetryMin, Max: min(flowRetryMax, max(lease/4, flowRetryMin))},
		slots:       slots,
		prefix:      hex.EncodeToString(b[:]) + ":",
		poll:        flowPollMin,
	}
}

// start runs the pump and the stage.
func (fs *flowStage) start(stop, grace context.Context) {
	go func() {
		for {
			ds := fs.q.TakeHeldAll()
			if ds == nil {
				close(fs.in)
				return
			}
			// Keys are computed here, beside the stage's round trips rather than between them.
			ws := make([]*flowWait, 0, len(ds))
			for _, d := range ds {
				if w := fs.prepare(d); w != nil {
					ws = append(ws, w)
				}
			}
			if len(ws) == 0 {
				continue
			}
			fs.in <- ws // the stage reads until the queue is closed, even after finish
		}
	}()
	go fs.run(stop, grace)
}

// take is the workers' Take. A throttled delivery past its start deadline goes back to the
// stage unrun.
func (fs *flowStage) take() (*Delivery, bool) {
	for {
		a, ok := <-fs.admitted
		if !ok {
			return nil, false
		}
		fs.unstarted.Add(-1)
		if !a.by.IsZero() && time.Now().After(a.by) {
			fs.finished <- flowDone{d: a.d, late: true}
			continue
		}
		fs.q.Unhold(1)
		return a.d, true
	}
}

// done hands a finished delivery's decision back (a worker).
func (fs *flowStage) done(d *Delivery, dec Decision) { fs.finished <- flowDone{d: d, dec: dec} }

// returned tells the stage that a delivery it admitted was handed back to the source unrun.
func (fs *flowStage) returned(d *Delivery) { fs.finished <- flowDone{d: d, returned: true} }

// finish is called once every worker has returned; it waits until the last releases are sent
// and every decision passed on.
func (fs *flowStage) finish() {
	close(fs.finishC)
	<-fs.doneC
}

func (fs *flowStage) run(stop, grace context.Context) {
	defer close(fs.doneC)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stopC, graceC := stop.Done(), grace.Done()
	finishC := fs.finishC
	admittedOpen := true
	for {
		in := fs.in
		if fs.closedIn {
			in = nil
		}
		select {
		case ws, ok := <-in:
			if !ok {
				fs.closedIn = true
				break
			}
			fs.parked = append(fs.parked, ws...)
		case fd := <-fs.finished:
			fs.finish1(fd)
			fs.poll = flowPollMin
		case <-timer.C:
		case <-stopC:
			stopC = nil
			fs.stopped = true
		case <-graceC:
			graceC = nil
			fs.returnParked()
			fs.abandonParked()
		case <-finishC:
			// Every worker is done: send the last releases, pass their decisions on.
			for {
				select {
				case fd := <-fs.finished:
					fs.finish1(fd)
					continue
				default:
				}
				break
			}
			fs.returnParked()
			for len(fs.releases) > 0 {
				if !fs.round(grace, false) {
					if grace.Err() != nil {
						fs.flushUnreleased()
						break
					}
					sleep(grace, fs.retry.Wait())
				}
			}
			// What the pump still takes (the queue closes once the source's Receive has
			// returned) never starts: back to the source, or left for it to deliver again.
			if !fs.closedIn {
				for ws := range fs.in {
					fs.parked = append(fs.parked, ws...)
					fs.returnParked()
					fs.abandonParked()
				}
			}
			fs.abandonParked()
			return
		}
		// Whatever else is ready goes into this round too: every handler that finished while
		// the last round was out frees its slot now, so one round admits as many as it can.
		fs.collect()
		if fs.stopped && fs.returner != nil {
			fs.returnParked()
		}
		admitting := admittedOpen && !(fs.stopped && fs.returner != nil)
		wait := time.Hour
		renewDue := !fs.renewAt.IsZero() && !time.Now().Before(fs.renewAt)
		work := len(fs.releases) > 0 || (admitting && len(fs.parked) > 0 && fs.admitMax() > 0) || renewDue
		backingOff := false
		if l := fs.linger(admitting, renewDue); l > 0 {
			wait = l
		} else if d := time.Until(fs.retryAt); work && d > 0 {
			// A failed round is not sent again before its backoff, whatever woke the stage.
			wait, backingOff = d, true
		} else if work {
			ok := fs.round(grace, admitting)
			switch {
			case !ok:
				wait = fs.retry.Wait()
				fs.retryAt = time.Now().Add(wait)
			case admitting && len(fs.parked) > 0 && fs.admitMax() > 0:
				wait = fs.nextPoll()
			}
		}
		// Workers end once nothing is left to admit: the queue is closed and drained (after a
		// stop, the source's Receive has returned), or the grace period is over.
		if admittedOpen && (fs.closedIn && len(fs.parked) == 0 && fs.unstarted.Load() == 0 || grace.Err() != nil) {
			admittedOpen = false
			close(fs.admitted)
		}
		if !fs.renewAt.IsZero() && !backingOff {
			wait = min(wait, max(time.Until(fs.renewAt), 0))
		}
		timer.Reset(wait) // Go 1.23 timers: Reset drops a stale tick
	}
}

// linger is how long a throttled stage without a slack (a period under 32ms, see
// newFlowStage) waits before its next round, for more handlers to finish: such a throttle
// admits only as many deliveries as there are free handlers, and without the wait
// the first handler to finish would send a round for itself alone, the others each a little
// later, so rounds stay small however fast the handlers are. It waits while some handlers still
// run, more deliveries wait than there are free handlers, and it is less than the last round's
// duration (at most flowMaxLinger) since the last round that admitted any: fast handlers all
// finish within that, and slow ones lose at most that.
func (fs *flowStage) linger(admitting, renewDue bool) time.Duration {
	if fs.f.Throttle == nil || fs.slack > 0 || !admitting || renewDue || fs.slots >= fs.r.p.Concurrency ||
		fs.slots >= len(fs.parked) || len(fs.releases) >= flowMaxRound {
		return 0
	}
	return time.Until(fs.admitAt)
}

// prepare computes a taken delivery's keys (the pump, in read order); nil when it needs no
// admission and was decided here (past the attempt cap, a key that cannot be computed).
func (fs *flowStage) prepare(d *Delivery) *flowWait {
	if d.Headers == nil {
		d.Headers = map[string]string{}
	}
	fs.r.policy.Caps.Number(d)
	now := time.Now()
	if dec, over := fs.r.policy.Before(d, now); over {
		// Past the attempt cap: dead-lettered without a handler, so without waiting for a key.
		fs.r.tally.read.Add(1)
		fs.r.logDecision(d, dec, nil)
		fs.q.Unhold(1)
		fs.decisions <- dec
		return nil
	}
	fs.seq++
	a := FlowAdmit{Token: fs.prefix + strconv.FormatUint(fs.seq, 36)}
	var err error
	if c := fs.f.Dedupe; c != nil && err == nil {
		var k string
		if k, err = c.Key.FlowKey(d); err == nil {
			a.Dedupe = "d:" + k
		} else {
			err = fmt.Errorf("dedupe key: %w", err)
		}
	}
	if c := fs.f.Concurrency; c != nil && err == nil {
		var k string
		if k, err = c.Key.FlowKey(d); err == nil {
			a.Conc, a.ConcLimit = "c:"+k, c.Limit
		} else {
			err = fmt.Errorf("concurrency_key key: %w", err)
		}
	}
	if c := fs.f.Throttle; c != nil && err == nil {
		a.Throttle, a.ThrottleLimit, a.Period = "t", c.Limit, c.Period+fs.slack
		if c.Key != nil {
			var k string
			if k, err = c.Key.FlowKey(d); err == nil {
				a.Throttle = "t:" + k
			} else {
				err = fmt.Errorf("throttle key: %w", err)
			}
		}
	}
	if err != nil {
		// A key expression that fails counts as retry (SPEC §13).
		err = fmt.Errorf("flow control: %w", err)
		fs.r.tally.read.Add(1)
		dec := fs.r.policy.Decide(d, Retry(), err, now)
		dec.Cause = err
		fs.r.logDecision(d, dec, err)
		fs.q.Unhold(1)
		fs.decisions <- dec
		return nil
	}
	return &flowWait{d: d, admit: a}
}

func (fs *flowStage) finish1(fd flowDone) {
	fs.slots++
	t := fs.running[fd.d]
	if fd.late {
		// It keeps its leases and claim; its start is asked for again, first in line. No more
		// extra admissions until deliveries finish quickly again.
		fs.took = max(fs.took, fs.slack)
		a := FlowAdmit{Token: t.lease.Token, Throttle: t.admit.Throttle, ThrottleLimit: t.admit.ThrottleLimit, Period: t.admit.Period}
		fs.parked = append([]*flowWait{{d: fd.d, admit: a, again: true}}, fs.parked...)
		return
	}
	if t != nil && !fd.returned {
		fs.took += (time.Since(t.at) - fs.took) / 8
	}
	if fs.f.Dedupe == nil && !fd.returned {
		// Nothing to mark before the settlement: it goes now, the release with the next
		// round.
		fs.decisions <- fd.dec
		fd.passed = true
	}
	if fs.handoff(fd) {
		return
	}
	fs.releases = append(fs.releases, fd)
}

// admitMax is how many deliveries a round may admit now: the free handlers, plus the extra
// ones a throttle's slack allows while deliveries finish well within it (see newFlowStage).
func (fs *flowStage) admitMax() int {
	if fs.slack > 0 && fs.took >= fs.slack/2 {
		return fs.slots - flowExtra*fs.r.p.Concurrency
	}
	return fs.slots
}

// collect takes, without waiting, every finished delivery and every batch the pump has ready.
func (fs *flowStage) collect() {
	for len(fs.releases) < flowMaxRound {
		select {
		case fd := <-fs.finished:
			fs.finish1(fd)
			fs.poll = flowPollMin
			continue
		default:
		}
		break
	}
	if fs.closedIn {
		return
	}
	select {
	case ws, ok := <-fs.in:
		if !ok {
			fs.closedIn = true
			return
		}
		fs.parked = append(fs.parked, ws...)
	default:
	}
}

// handoff passes a finished delivery's concurrency lease straight to the next waiting
// delivery of its key, without a round trip, when a concurrency key is the only block (a
// throttle counts every start, a dedupe claim is per message). After flowMaxHandoff in a row
// the lease is released instead, so other processes get their turn at the key.
func (fs *flowStage) handoff(fd flowDone) bool {
	if fd.returned || fs.f.Concurrency == nil || fs.f.Dedupe != nil || fs.f.Throttle != nil || fs.stopped {
		return false
	}
	t := fs.running[fd.d]
	if t == nil || t.handoffs >= flowMaxHandoff {
		return false
	}
	for i, w := range fs.parked {
		if w.admit.Conc != t.lease.Conc {
			continue
		}
		delete(fs.running, fd.d)
		fs.running[w.d] = &flowTicket{at: time.Now(), lease: t.lease, admit: w.admit, handoffs: t.handoffs + 1}
		fs.parked = append(fs.parked[:i], fs.parked[i+1:]...)
		fs.slots--
		fs.unstarted.Add(1)
		fs.admitted <- flowStart{d: w.d}
		return true
	}
	return false
}

// returnParked hands every waiting delivery back to the source (at a stop).
func (fs *flowStage) returnParked() {
	if len(fs.parked) == 0 || fs.returner == nil {
		return
	}
	ds := make([]*Delivery, len(fs.parked))
	for i, w := range fs.parked {
		ds[i] = w.d
		if w.again {
			fs.releases = append(fs.releases, flowDone{d: w.d, returned: true})
		}
	}
	fs.parked = nil
	fs.returner.Return(ds)
	fs.q.Unhold(len(ds))
}

// abandonParked gives up on what still waits when the grace period is over: a source with
// acknowledgement delivers it again.
func (fs *flowStage) abandonParked() {
	for _, w := range fs.parked {
		fs.r.log.Error().Str(FieldKey, w.d.Key).Str(FieldID, w.d.ID).Msg("flow control: waiting delivery abandoned at shutdown")
		if w.again {
			fs.releases = append(fs.releases, flowDone{d: w.d, returned: true})
		}
	}
	fs.q.Unhold(len(fs.parked))
	fs.parked = nil
}

// roundReq is one store round as sent: the request, and what its entries stand for.
type roundReq struct {
	r        *FlowRound
	rel      []flowDone  // the finished deliveries whose leases it releases, by Releases index
	renewing []*Delivery // the running deliveries whose leases it renews, by Renews index
	asked    int         // admissions asked (parked deliveries with ask >= 0)
}

// round is one store round: releases, due renewals and, when admit, admissions. It reports
// whether the store answered.
func (fs *flowStage) round(ctx context.Context, admit bool) bool {
	now := time.Now()
	q := fs.request(now, admit)
	if len(q.r.Releases)+len(q.r.Renews)+len(q.r.Admits) == 0 {
		return true
	}
	if err := fs.f.Store.Round(ctx, q.r); err != nil {
		fs.roundFailed(err)
		return false
	}
	fs.rtt = time.Since(now)
	fs.retry.Reset()
	if fs.failing {
		fs.failing = false
		fs.r.log.Info().Msg("flow control: store recovered")
	}
	fs.applyReleases(q)
	fs.applyRenews(q, now)
	fs.applyVerdicts(q, now)
	if fs.slots < fs.r.p.Concurrency && len(q.r.Admits) > 0 {
		fs.admitAt = time.Now().Add(min(fs.rtt, flowMaxLinger))
	}
	return true
}

// request builds a round: the pending releases (at most flowMaxRound), every running lease when
// renewals are due, and, when admit, the admissions chooseAdmits picks.
func (fs *flowStage) request(now time.Time, admit bool) roundReq {
	q := roundReq{r: &FlowRound{Lease: fs.lease}, rel: fs.releases}
	if len(q.rel) > flowMaxRound {
		q.rel = q.rel[:flowMaxRound]
	}
	for _, fd := range q.rel {
		x := FlowRelease{FlowLease: fs.running[fd.d].lease}
		if fs.f.Dedupe != nil && !fd.returned && fd.dec.Label.acked() {
			x.Window = fs.f.Dedupe.Window
		}
		q.r.Releases = append(q.r.Releases, x)
	}
	if !fs.renewAt.IsZero() && !now.Before(fs.renewAt) {
		for d, t := range fs.running {
			q.renewing = append(q.renewing, d)
			q.r.Renews = append(q.r.Renews, t.lease)
		}
	}
	if admit && fs.admitMax() > 0 {
		q.r.Max = fs.admitMax()
		q.r.Admits = chooseAdmits(fs.parked, q.r.Releases, fs.localConc, fs.localDedupe, q.r.Max)
		q.asked = len(q.r.Admits)
	}
	return q
}

// chooseAdmits picks the waiting deliveries a round asks the store to admit, in order, and sets
// each one's ask (its index among them, -1 when not asked). A key this process holds itself
// (held, less what rel releases) cannot be had until it is released: such deliveries, and later
// ones that share a key with them (order per key), are not sent, which spares Redis re-checking
// every busy key on every round. It asks for no more than can matter: twice what may be granted
// (grant), so that a key busy in another process does not hold back the rest, without making
// Redis read hundreds of candidates to grant a few.
func chooseAdmits(parked []*flowWait, rel []FlowRelease, heldConc map[string]int, heldDedupe map[string]bool, grant int) []FlowAdmit {
	relConc, relDedupe := map[string]int{}, map[string]bool{}
	for _, x := range rel {
		relConc[x.Conc]++
		relDedupe[x.Dedupe] = true
	}
	blocked := map[string]bool{}
	limit := min(flowMaxRound, grant+min(grant, 32))
	// What this round's earlier candidates would hold if admitted: a later candidate that could
	// only wait behind them is not sent either.
	askConc, askDedupe := map[string]int{}, map[string]bool{}
	var admits []FlowAdmit
	for _, w := range parked {
		w.ask = -1
		a := &w.admit
		if len(admits) >= limit || blocked[a.Conc] || blocked[a.Dedupe] || blocked[a.Throttle] {
			continue
		}
		if a.Conc != "" && heldConc[a.Conc]-relConc[a.Conc]+askConc[a.Conc] >= a.ConcLimit ||
			a.Dedupe != "" && (askDedupe[a.Dedupe] || heldDedupe[a.Dedupe] && !relDedupe[a.Dedupe]) {
			for _, k := range []string{a.Conc, a.Dedupe, a.Throttle} {
				if k != "" {
					blocked[k] = true
				}
			}
			continue
		}
		if a.Conc != "" {
			askConc[a.Conc]++
		}
		if a.Dedupe != "" {
			askDedupe[a.Dedupe] = true
		}
		w.ask = len(admits)
		admits = append(admits, *a)
	}
	return admits
}

// roundFailed notes a whole round that failed (a lost connection, a failover): it is sent again
// after a backoff, and until then nothing is admitted, and no decision waiting for its release
// goes on. Logged once until a round succeeds again.
func (fs *flowStage) roundFailed(err error) {
	fs.admitAt = time.Time{}
	fs.r.metrics.SourceError()
	if !fs.failing {
		fs.failing = true
		ev := fs.r.log.Warn()
		var f Fault
		if errors.As(err, &f) {
			if f.Permanent {
				ev = fs.r.log.Error()
			}
			ev = ev.Str("reason", f.Reason)
		}
		ev.Err(err).Msg("flow control: store round failed; retrying with backoff")
	}
	fs.retry.Fail()
}

// applyReleases passes on the decisions of the released deliveries. One whose dedupe key could
// not be marked done is left unsettled instead (the mark goes before the acknowledgement); a
// lease or claim that could not be let go expires by itself.
func (fs *flowStage) applyReleases(q roundReq) {
	fs.releases = fs.releases[len(q.rel):]
	relFaults := faultsByIndex(q.r.ReleaseFaults, len(q.rel))
	for i, fd := range q.rel {
		if t := fs.running[fd.d]; t != nil {
			fs.unhold(t.lease)
		}
		delete(fs.running, fd.d)
		if fl := faultsAt(relFaults, i); len(fl) > 0 && !fd.failed {
			fs.r.metrics.SettleFailure(fl[0].Reason)
			if q.r.Releases[i].Window > 0 && !fd.passed {
				fs.logPermanent(fd.d, fl, "flow control: marking a dedupe key done failed permanently: delivery left unsettled (not acknowledged), it comes back by its source's rules")
				fs.leaveUnsettled(fd.dec)
				continue
			}
			fs.logPermanent(fd.d, fl, "flow control: releasing a lease failed permanently: the key stays taken until the lease expires")
		}
		if !fd.returned && !fd.passed {
			fs.decisions <- fd.dec
		}
	}
}

// applyRenews sets the next renewal and logs the renewals that failed or came too late.
func (fs *flowStage) applyRenews(q roundReq, now time.Time) {
	if len(q.r.Renews) > 0 {
		fs.renewAt = now.Add(fs.lease / 3)
		renewFaults := faultsByIndex(q.r.RenewFaults, len(q.renewing))
		for i, fl := range renewFaults {
			if len(fl) > 0 {
				fs.r.metrics.SettleFailure(fl[0].Reason)
				fs.logPermanent(q.renewing[i], fl, "flow control: renewing a running delivery's lease failed permanently: it may expire while the handler runs, and its key run twice")
			}
		}
		for _, i := range q.r.Lost {
			d := q.renewing[i]
			fs.r.log.Warn().Str(FieldKey, d.Key).Str(FieldID, d.ID).
				Msg("flow control: a running delivery's lease expired before it was renewed; its key may run twice")
		}
	}
	if len(fs.running) == 0 {
		fs.renewAt = time.Time{}
	}
}

// applyVerdicts acts on the store's answer to each asked admission: admitted ones go to the
// workers, duplicates are acknowledged, failed ones count as retry; the rest wait on.
func (fs *flowStage) applyVerdicts(q roundReq, now time.Time) {
	progressed := false
	keep := fs.parked[:0]
	admitFaults := faultsByIndex(q.r.AdmitFaults, q.asked)
	for _, w := range fs.parked {
		if q.asked == 0 || w.ask < 0 {
			keep = append(keep, w)
			continue
		}
		if fl := faultsAt(admitFaults, w.ask); len(fl) > 0 {
			progressed = true
			fs.admitFailed(w, fl, now)
			continue
		}
		v := q.r.Verdicts[w.ask]
		switch v.Kind {
		case FlowAdmitted:
			progressed = true
			fs.admitted1(w, now)
		case FlowDuplicate:
			progressed = true
			fs.r.tally.read.Add(1)
			dec := Decision{Settlement: Settlement{Delivery: w.d, Action: ActAck}, Label: OutcomeDuplicate}
			fs.r.logDecision(w.d, dec, nil)
			fs.q.Unhold(1)
			fs.decisions <- dec
		default:
			if v.RetryIn > 0 && v.RetryIn < fs.poll {
				fs.poll = max(v.RetryIn, time.Millisecond)
			}
			keep = append(keep, w)
		}
	}
	clear(fs.parked[len(keep):])
	fs.parked = keep
	if progressed {
		fs.poll = flowPollMin
	}
}

// admitted1 hands an admitted delivery to the workers, holding its lease (a late one asking
// again holds it already).
func (fs *flowStage) admitted1(w *flowWait, now time.Time) {
	if !w.again {
		l := FlowLease{Token: w.admit.Token, Conc: w.admit.Conc, Dedupe: w.admit.Dedupe}
		fs.running[w.d] = &flowTicket{at: now, lease: l, admit: w.admit}
		fs.hold(l)
	} else if t := fs.running[w.d]; t != nil {
		t.at = now
	}
	if fs.renewAt.IsZero() {
		fs.renewAt = now.Add(fs.lease / 3)
	}
	fs.slots--
	a := flowStart{d: w.d}
	if fs.slack > 0 {
		a.by = now.Add(fs.slack)
	}
	fs.unstarted.Add(1)
	fs.admitted <- a
}

// admitFailed decides a delivery whose admission failed permanently (a flow key it needs can
// never be written): like a key expression that fails, it counts as retry, so the policy's
// backoff and attempt cap apply and nothing is lost; the part of its lease or claim that may
// have been taken is released first.
func (fs *flowStage) admitFailed(w *flowWait, fl []Fault, now time.Time) {
	fs.r.metrics.SettleFailure(fl[0].Reason)
	fs.logPermanent(w.d, fl, "flow control: admission failed permanently: the delivery counts as retry")
	if !w.again {
		l := FlowLease{Token: w.admit.Token, Conc: w.admit.Conc, Dedupe: w.admit.Dedupe}
		fs.running[w.d] = &flowTicket{at: now, lease: l, admit: w.admit}
		fs.hold(l)
	}
	err := fmt.Errorf("flow control: %w", fl[0])
	fs.r.tally.read.Add(1)
	dec := fs.r.policy.Decide(w.d, Retry(), err, now)
	dec.Cause = err
	fs.r.logDecision(w.d, dec, err)
	fs.q.Unhold(1)
	fs.releases = append(fs.releases, flowDone{d: w.d, dec: dec, failed: true})
}

// logPermanent logs a delivery's permanent store faults at error once per command, key and
// reason (the settler's rule, SPEC §10), later ones at debug.
func (fs *flowStage) logPermanent(d *Delivery, fl []Fault, msg string) {
	for _, f := range fl {
		if first, _ := fs.r.permanent.Note(faultKey{f.Command, f.Key, f.Reason}, time.Now()); !first {
			fs.r.log.Debug().Err(f).Str(FieldKey, d.Key).Str(FieldID, d.ID).Msg(msg)
			continue
		}
		fs.r.log.Error().Err(f.Err).Str("command", f.Command).Str(FieldKey, f.Key).Str("reason", f.Reason).
			Str("source_key", d.Key).Str(FieldID, d.ID).Msg(msg)
	}
}

// leaveUnsettled gives up on a decision as the settler does after a permanent failure: the
// source forgets the delivery, and its own rules bring it back.
func (fs *flowStage) leaveUnsettled(d Decision) {
	if d.Span != nil {
		d.Span.End(d.Label.String(), errAbandoned)
	}
	if rel, ok := fs.r.p.Source.(Releaser); ok && d.Settlement.Delivery != nil {
		rel.Release(d.Settlement)
	}
}

// faultsByIndex groups faults by their index below n; nil when there are none (read it with
// faultsAt: rounds without faults allocate nothing).
func faultsByIndex(fs []Fault, n int) [][]Fault {
	if len(fs) == 0 {
		return nil
	}
	out := make([][]Fault, n)
	for _, f := range fs {
		if f.Index >= 0 && f.Index < n {
			out[f.Index] = append(out[f.Index], f)
		}
	}
	return out
}

func faultsAt(ff [][]Fault, i int) []Fault {
	if ff == nil {
		return nil
	}
	return ff[i]
}

// hold and unhold count the keys this process's running deliveries hold.
func (fs *flowStage) hold(l FlowLease) {
	if l.Conc != "" {
		fs.localConc[l.Conc]++
	}
	if l.Dedupe != "" {
		fs.localDedupe[l.Dedupe] = true
	}
}

func (fs *flowStage) unhold(l FlowLease) {
	if l.Conc != "" {
		if fs.localConc[l.Conc]--; fs.localConc[l.Conc] <= 0 {
			delete(fs.localConc, l.Conc)
		}
	}
	delete(fs.localDedupe, l.Dedupe)
}

func (fs *flowStage) nextPoll() time.Duration {
	p := fs.poll
	fs.poll = min(fs.poll*2, flowPollMax)
	return p
}

// flushUnreleased passes on the decisions whose leases could not be released before the end
// of the grace period: the leases expire by themselves. An ack or drop whose dedupe key was not
// marked done is left unsettled instead: the mark goes before the acknowledgement.
func (fs *flowStage) flushUnreleased() {
	for _, fd := range fs.releases {
		if fd.returned || fd.passed {
			continue
		}
		if fs.f.Dedupe != nil && fd.dec.Label.acked() {
			fs.r.log.Error().Str(FieldKey, fd.d.Key).Str(FieldID, fd.d.ID).
				Msg("flow control: dedupe key not marked done by the end of the grace period: delivery left unsettled, it comes back by its source's rules")
			fs.leaveUnsettled(fd.dec)
			continue
		}
		fs.decisions <- fd.dec
	}
	fs.releases = nil
}
