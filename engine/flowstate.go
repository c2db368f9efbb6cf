package engine

import (
	"fmt"
	"strconv"
	"time"

	"github.com/flowrun/flowrun/internal/backoff"
)

// flowState is flow control's bookkeeping (SPEC §13): the deliveries waiting for an admission,
// the running ones and the keys they hold, the finished ones whose leases are to be released,
// and the clocks of polling, renewals and backoff. Its methods are pure: they build a store
// round from the state and apply the store's answer to it, returning what the engine is to do
// (flowActs), so each step is tested without a store, a queue or a goroutine. The flowGate
// that owns it guards it with the queue's lock.
type flowState struct {
	f      *Flow
	policy *Policy
	conc   int           // the pipeline's handlers
	lease  time.Duration // Flow.Lease or DefaultLease
	// slack is how late after its round was sent a throttled delivery may still start; 0:
	// a throttle admits only for free handlers (see newFlowState).
	slack time.Duration

	parked  []*flowWait               // waiting for an admission, in read order
	running map[*Delivery]*flowTicket // admitted, not yet released
	// The keys running deliveries of this process hold: concurrency keys counted, dedupe
	// claims.
	localConc   map[string]int
	localDedupe map[string]bool
	releases    []flowDone
	spare       *FlowRound // the last round, whose room the next reuses (request)
	slots       int        // admissions that may be granted now (newFlowState) minus those not yet finished
	poll        time.Duration
	renewAt     time.Time
	// A throttled gate sends no admission round before admitAt unless every handler is free
	// (see linger); rtt is the last round's duration.
	admitAt time.Time
	rtt     time.Duration
	// took averages how long admitted deliveries took to finish (waiting for a handler
	// included): the extra admissions are made only while it is well within the slack.
	took time.Duration
	// retry grows with the whole rounds failed in a row: from flowRetryMin, doubling up to
	// flowRetryMax (a store down for minutes is asked every few seconds, not five times a
	// second), and at most a quarter of the lease, so that once the store is back the leases of
	// running deliveries are renewed well before they expire. No round is sent before retryAt.
	retry   backoff.Doubling
	retryAt time.Time
	failing bool // the store fails whole rounds (logged once)
	stopped bool // a stop came: no lease passes on (handoff)
}

// flowWait is a delivery waiting for its admission.
type flowWait struct {
	d     *Delivery
	admit FlowAdmit
	ask   int  // its index in the round out now; -1 when not asked
	again bool // admitted, but too late to start: it holds its leases and asks for a start
	// ticket is what it holds once admitted (flowState.running points here): one allocation
	// per delivery for both.
	ticket flowTicket
}

// flowTicket is what a running delivery holds.
type flowTicket struct {
	at    time.Time // admitted
	by    time.Time // with a throttle slack, the latest it may start; zero: any time
	lease FlowLease
	// throttle is what it was admitted with of its throttle (a late start asks for it again):
	// the key, limit and period, not the whole admission.
	throttle throttleAsk
	handoffs int // times the lease passed from one delivery of its key to the next
}

// throttleAsk is the throttle part of an admission.
type throttleAsk struct {
	key    string
	limit  int
	period time.Duration
}

func throttleOf(a FlowAdmit) throttleAsk {
	return throttleAsk{key: a.Throttle, limit: a.ThrottleLimit, period: a.Period}
}

// flowDone is a delivery whose lease is to be released.
type flowDone struct {
	d        *Delivery
	dec      Decision
	returned bool // handed back to the source at a stop, never run
	passed   bool // its decision went to the settler already
	failed   bool // its admission failed permanently (logged and counted then), never run
}

// flowFault is a delivery's permanent store faults, to count and log with msg.
type flowFault struct {
	d   *Delivery
	fl  []Fault
	msg string
}

// flowFailed is a delivery whose admission failed permanently, decided as retry.
type flowFailed struct {
	d   *Delivery
	dec Decision
	err error
}

// flowActs is what applying a store round asks of the engine, in this order: count and log the
// faults and lost leases, log the failed admissions' decisions, settle the duplicates, leave
// the unsettled ones to their source, pass the decisions on, and start the admitted deliveries.
type flowActs struct {
	faults    []flowFault
	lost      []*Delivery // running deliveries whose lease expired before its renewal
	failed    []flowFailed
	dups      []*Delivery // duplicates: acknowledged as such
	unsettled []Decision  // an ack whose dedupe key could not be marked done
	pass      []Decision  // to the settler
	start     []*Delivery // admitted: to the workers
}

// reset empties the acts, keeping their room for the next round: a round's decisions are
// many, and a goroutine that sends rounds carries its acts out before the next.
func (a *flowActs) reset() {
	clear(a.faults)
	clear(a.lost)
	clear(a.failed)
	clear(a.dups)
	clear(a.unsettled)
	clear(a.pass)
	clear(a.start)
	*a = flowActs{faults: a.faults[:0], lost: a.lost[:0], failed: a.failed[:0], dups: a.dups[:0],
		unsettled: a.unsettled[:0], pass: a.pass[:0], start: a.start[:0]}
}

// unheld is how many of the waiting deliveries the acts decided without a handler: they stop
// counting against the read-ahead bound.
func (a *flowActs) unheld() int { return len(a.dups) + len(a.failed) }

func newFlowState(f *Flow, policy *Policy, conc, queued int) *flowState {
	lease := f.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
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
	slots, slack := conc+queued, time.Duration(0)
	if f.Throttle != nil {
		slots = conc
		if s := f.Throttle.Period / flowSlackDiv; s >= flowMinSlack {
			slots, slack = (1+flowExtra)*conc, s
		}
	}
	return &flowState{
		f: f, policy: policy, conc: conc, lease: lease, slack: slack,
		running:     map[*Delivery]*flowTicket{},
		localConc:   map[string]int{},
		localDedupe: map[string]bool{},
		retry:       backoff.Doubling{Base: flowRetryMin, Max: min(flowRetryMax, max(lease/4, flowRetryMin))},
		slots:       slots,
		poll:        flowPollMin,
	}
}

// flowAdmit computes a delivery's flow keys: what its admission asks for, with token. A key
// expression that fails is an error (the delivery counts as retry, SPEC §13).
func flowAdmit(f *Flow, slack time.Duration, token string, d *Delivery) (FlowAdmit, error) {
	return flowAdmitSeq(f, slack, token, 0, false, d)
}

// flowAdmitSeq is flowAdmit with the token prefix followed, when numbered, by seq in base 36.
// The dedupe and concurrency keys and the token are built in one string, each a slice of it:
// one allocation per admission where a concatenation per key and the token each took one (they
// live exactly as long as each other; a store that keeps a key longer clones it).
func flowAdmitSeq(f *Flow, slack time.Duration, prefix string, seq uint64, numbered bool, d *Delivery) (FlowAdmit, error) {
	var a FlowAdmit
	var kd, kc string
	var err error
	if c := f.Dedupe; c != nil {
		if kd, err = c.Key.FlowKey(d); err != nil {
			return a, fmt.Errorf("dedupe key: %w", err)
		}
	}
	if c := f.Concurrency; c != nil {
		if kc, err = c.Key.FlowKey(d); err != nil {
			return a, fmt.Errorf("concurrency_key key: %w", err)
		}
		a.ConcLimit = c.Limit
	}
	if f.Dedupe == nil && f.Concurrency == nil || !numbered && prefix == "" {
		// Nothing to build together: at most one key, or no token.
		a.Token = prefix
		if numbered {
			a.Token = string(strconv.AppendUint([]byte(prefix), seq, 36))
		}
		if f.Dedupe != nil {
			a.Dedupe = "d:" + kd
		}
		if f.Concurrency != nil {
			a.Conc = "c:" + kc
		}
	} else {
		var buf [96]byte
		b := buf[:0]
		dEnd := 0
		if f.Dedupe != nil {
			b = append(append(b, "d:"...), kd...)
			dEnd = len(b)
		}
		cEnd := dEnd
		if f.Concurrency != nil {
			b = append(append(b, "c:"...), kc...)
			cEnd = len(b)
		}
		b = append(b, prefix...)
		if numbered {
			b = strconv.AppendUint(b, seq, 36)
		}
		all := string(b)
		a.Dedupe, a.Conc, a.Token = all[:dEnd], all[dEnd:cEnd], all[cEnd:]
	}
	if c := f.Throttle; c != nil {
		a.Throttle, a.ThrottleLimit, a.Period = "t", c.Limit, c.Period+slack
		if c.Key != nil {
			k, err := c.Key.FlowKey(d)
			if err != nil {
				return a, fmt.Errorf("throttle key: %w", err)
			}
			a.Throttle = "t:" + k
		}
	}
	return a, nil
}

// park adds deliveries to the end of the wait.
func (s *flowState) park(ws []*flowWait) { s.parked = append(s.parked, ws...) }

// clocked reports whether finished needs the time: for a throttle's slack (took) or a lease
// that may pass on (handoff). Without, a finish reads no clock (a clock read costs a system call
// on some virtual machines).
func (s *flowState) clocked() bool {
	return s.slack > 0 || s.f.Concurrency != nil && s.f.Dedupe == nil && s.f.Throttle == nil
}

// finished notes a delivery its handler is done with (or that went back to its source unrun).
// pass says its decision goes to the settler now: without dedupe there is nothing to mark
// before the settlement, and its release goes with the next round. next is a waiting delivery
// its concurrency lease passed to (handoff), to start now; asking says a round is out.
func (s *flowState) finished(fd flowDone, now time.Time, asking bool) (pass bool, next *Delivery) {
	s.slots++
	s.poll = flowPollMin
	if t := s.running[fd.d]; t != nil && !fd.returned && s.slack > 0 {
		s.took += (now.Sub(t.at) - s.took) / 8
	}
	if s.f.Dedupe == nil && !fd.returned {
		pass, fd.passed = true, true
	}
	if next = s.handoff(fd, now, asking); next != nil {
		return pass, next
	}
	if !s.holds() {
		// A throttle alone holds nothing a store would let go (its start stays counted): the
		// delivery is done with here, rather than walked through a round's releases.
		delete(s.running, fd.d)
		return pass, nil
	}
	s.releases = append(s.releases, fd)
	return pass, nil
}

// holds reports whether an admitted delivery holds anything in the store (a concurrency lease,
// a dedupe claim) that is renewed while it runs and released when it finishes.
func (s *flowState) holds() bool { return s.f.Concurrency != nil || s.f.Dedupe != nil }

// late notes an admitted delivery a worker took after its start deadline: it keeps its leases
// and claim, and its start is asked for again, first in line. No more extra admissions until
// deliveries finish quickly again.
func (s *flowState) late(d *Delivery) {
	s.slots++
	s.poll = flowPollMin
	s.took = max(s.took, s.slack)
	t := s.running[d]
	a := FlowAdmit{Token: t.lease.Token, Throttle: t.throttle.key, ThrottleLimit: t.throttle.limit, Period: t.throttle.period}
	s.parked = append([]*flowWait{{d: d, admit: a, ask: -1, again: true}}, s.parked...)
}

// handoff passes a finished delivery's concurrency lease straight to the next waiting delivery
// of its key, without a round trip, when a concurrency key is the only block (a throttle counts
// every start, a dedupe claim is per message). After flowMaxHandoff in a row the lease is
// released instead, so other processes get their turn at the key. While a round is out, the
// next delivery of the key may be in it: then the lease is released too.
func (s *flowState) handoff(fd flowDone, now time.Time, asking bool) *Delivery {
	if fd.returned || s.f.Concurrency == nil || s.f.Dedupe != nil || s.f.Throttle != nil || s.stopped {
		return nil
	}
	t := s.running[fd.d]
	if t == nil || t.handoffs >= flowMaxHandoff {
		return nil
	}
	for i, w := range s.parked {
		if w.admit.Conc != t.lease.Conc {
			continue
		}
		if asking && w.ask >= 0 {
			return nil
		}
		delete(s.running, fd.d)
		w.ticket = flowTicket{at: now, lease: t.lease, throttle: throttleOf(w.admit), handoffs: t.handoffs + 1}
		s.running[w.d] = &w.ticket
		// The next of a key is near the front: the deliveries before it move up one, rather
		// than the hundreds after it down one.
		copy(s.parked[1:i+1], s.parked[:i])
		s.parked[0] = nil
		s.parked = s.parked[1:]
		s.slots--
		return w.d
	}
	return nil
}

// admitMax is how many deliveries a round may admit now: the free handlers, plus the extra
// ones a throttle's slack allows while deliveries finish well within it (see newFlowState).
func (s *flowState) admitMax() int {
	if s.slack > 0 && s.took >= s.slack/2 {
		return s.slots - flowExtra*s.conc
	}
	return s.slots
}

// renewDue reports whether the running leases are to be renewed now.
func (s *flowState) renewDue(now time.Time) bool {
	return !s.renewAt.IsZero() && !now.Before(s.renewAt)
}

// wantsAdmit reports whether a round would ask for admissions.
func (s *flowState) wantsAdmit() bool { return len(s.parked) > 0 && s.admitMax() > 0 }

// linger is how long a throttled gate without a slack (a period under 32ms, see newFlowState)
// waits before its next round, for more handlers to finish: such a throttle admits only as many
// deliveries as there are free handlers, and without the wait the first handler to finish
// would send a round for itself alone, the others each a little later, so rounds stay small
// however fast the handlers are. It waits while some handlers still run, more deliveries wait
// than there are free handlers, and it is less than the last round's duration (at most
// flowMaxLinger) since the last round that admitted any: fast handlers all finish within that,
// and slow ones lose at most that.
func (s *flowState) linger(now time.Time, admitting bool) time.Duration {
	if s.f.Throttle == nil || s.slack > 0 || !admitting || s.renewDue(now) || s.slots >= s.conc ||
		s.slots >= len(s.parked) || len(s.releases) >= flowMaxRound {
		return 0
	}
	return s.admitAt.Sub(now)
}

func (s *flowState) nextPoll() time.Duration {
	p := s.poll
	s.poll = min(s.poll*2, flowPollMax)
	return p
}

// takeParked empties the wait, for its deliveries to go back to their source or be abandoned;
// one that was admitted before (again) has its leases released.
func (s *flowState) takeParked() []*Delivery {
	if len(s.parked) == 0 {
		return nil
	}
	ds := make([]*Delivery, len(s.parked))
	for i, w := range s.parked {
		ds[i] = w.d
		if w.again {
			s.releases = append(s.releases, flowDone{d: w.d, returned: true})
		}
	}
	s.parked = nil
	return ds
}

// roundFailed notes a whole round that failed (a lost connection, a failover): it is sent again
// after a backoff, and until then nothing is admitted, and no decision waiting for its release
// goes on. first says it is the first of a run of failures (logged once).
func (s *flowState) roundFailed(now time.Time) (first bool) {
	s.admitAt = time.Time{}
	first, s.failing = !s.failing, true
	s.retryAt = now.Add(s.retry.Fail())
	return first
}

// roundDone notes a round the store answered, sent at sent and answered at now; recovered says
// rounds had failed before it.
func (s *flowState) roundDone(sent, now time.Time) (recovered bool) {
	s.rtt = now.Sub(sent)
	s.retry.Reset()
	recovered, s.failing = s.failing, false
	return recovered
}

// flushUnreleased hands back the decisions whose leases could not be released before the end
// of the grace period (the leases expire by themselves): pass goes to the settler; an ack or
// drop whose dedupe key was not marked done is left unsettled instead (unsettled), since the
// mark goes before the acknowledgement.
func (s *flowState) flushUnreleased() (pass, unsettled []flowDone) {
	for _, fd := range s.releases {
		switch {
		case fd.returned || fd.passed:
		case s.f.Dedupe != nil && fd.dec.Label.acked():
			unsettled = append(unsettled, fd)
		default:
			pass = append(pass, fd)
		}
	}
	s.releases = nil
	return pass, unsettled
}

// hold and unhold count the keys this process's running deliveries hold.
func (s *flowState) hold(l FlowLease) {
	if l.Conc != "" {
		s.localConc[l.Conc]++
	}
	if l.Dedupe != "" {
		s.localDedupe[l.Dedupe] = true
	}
}

func (s *flowState) unhold(l FlowLease) {
	if l.Conc != "" {
		if s.localConc[l.Conc]--; s.localConc[l.Conc] <= 0 {
			delete(s.localConc, l.Conc)
		}
	}
	if l.Dedupe != "" { // a delete hashes its key even in an empty map
		delete(s.localDedupe, l.Dedupe)
	}
}
