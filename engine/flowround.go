package engine

import (
	"fmt"
	"time"
)

// roundReq is one store round as sent: the request, and what its entries stand for.
type roundReq struct {
	r        *FlowRound
	rel      []flowDone  // the finished deliveries whose leases it releases, by Releases index
	renewing []*Delivery // the running deliveries whose leases it renews, by Renews index
	asked    int         // admissions asked (parked deliveries with ask >= 0)
}

func (q roundReq) empty() bool { return len(q.r.Releases)+len(q.r.Renews)+len(q.r.Admits) == 0 }

// request builds a round: the pending releases (at most flowMaxRound), every running lease when
// renewals are due, and, when admit, the admissions chooseAdmits picks.
func (s *flowState) request(now time.Time, admit bool) roundReq {
	// One round is out at a time, and its answer is applied before the next is built: each
	// reuses the last one's room rather than allocating a few hundred entries' worth anew.
	r := s.spare
	if r == nil {
		r = new(FlowRound)
		s.spare = r
	}
	*r = FlowRound{Lease: s.lease, Releases: r.Releases[:0], Renews: r.Renews[:0], Admits: r.Admits[:0],
		Verdicts: r.Verdicts[:0], Lost: r.Lost[:0], ReleaseFaults: r.ReleaseFaults[:0],
		RenewFaults: r.RenewFaults[:0], AdmitFaults: r.AdmitFaults[:0]}
	q := roundReq{r: r, rel: s.releases}
	if len(q.rel) > flowMaxRound {
		q.rel = q.rel[:flowMaxRound]
	}
	for _, fd := range q.rel {
		x := FlowRelease{FlowLease: s.running[fd.d].lease}
		if s.f.Dedupe != nil && !fd.returned && fd.dec.Label.acked() {
			x.Window = s.f.Dedupe.Window
		}
		q.r.Releases = append(q.r.Releases, x)
	}
	if s.renewDue(now) {
		q.renewing = make([]*Delivery, 0, len(s.running))
		for d, t := range s.running {
			q.renewing = append(q.renewing, d)
			q.r.Renews = append(q.r.Renews, t.lease)
		}
	}
	if admit && s.admitMax() > 0 {
		q.r.Max = s.admitMax()
		q.r.Admits = chooseAdmitsInto(q.r.Admits, s.parked, q.r.Releases, s.localConc, s.localDedupe, q.r.Max)
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
	return chooseAdmitsInto(nil, parked, rel, heldConc, heldDedupe, grant)
}

// chooseAdmitsInto is chooseAdmits appending to admits (empty, with room to reuse).
func chooseAdmitsInto(admits []FlowAdmit, parked []*flowWait, rel []FlowRelease, heldConc map[string]int, heldDedupe map[string]bool, grant int) []FlowAdmit {
	// The keys rel releases, counted the first time a candidate needs a key held here: most
	// rounds need none (a key is held here only while its delivery runs), and a round releases
	// hundreds.
	var relConc map[string]int
	var relDedupe map[string]bool
	released := func() {
		if relConc != nil {
			return
		}
		relConc, relDedupe = make(map[string]int), make(map[string]bool)
		for _, x := range rel {
			if x.Conc != "" {
				relConc[x.Conc]++
			}
			if x.Dedupe != "" {
				relDedupe[x.Dedupe] = true
			}
		}
	}
	limit := min(flowMaxRound, grant+min(grant, 32))
	// blocked holds the keys of candidates that could not be sent; askConc and askDedupe what
	// this round's earlier candidates would hold if admitted: a later candidate that could only
	// wait behind them is not sent either. Each is made when first needed.
	var blocked map[string]bool
	var askConc map[string]int
	var askDedupe map[string]bool
	if len(parked) > 0 && parked[0].admit.Conc == "" && cap(admits) < min(limit, len(parked)) {
		// Without a concurrency key nearly every candidate is sent (a pipeline's deliveries
		// all ask for the same blocks): room for them at once, not grown a doubling at a time.
		admits = make([]FlowAdmit, 0, min(limit, len(parked)))
	}
	for _, w := range parked {
		w.ask = -1
		a := &w.admit
		// Each map is asked once a key, and only for the keys a candidate has: a round walks
		// hundreds of candidates.
		if len(admits) >= limit || blocked != nil && (a.Conc != "" && blocked[a.Conc] ||
			a.Dedupe != "" && blocked[a.Dedupe] || a.Throttle != "" && blocked[a.Throttle]) {
			continue
		}
		held := 0
		if a.Conc != "" {
			held = heldConc[a.Conc]
		}
		heldD := a.Dedupe != "" && heldDedupe[a.Dedupe]
		if held > 0 || heldD {
			released()
		}
		if a.Conc != "" && held-relConc[a.Conc]+askConc[a.Conc] >= a.ConcLimit ||
			a.Dedupe != "" && (askDedupe[a.Dedupe] || heldD && !relDedupe[a.Dedupe]) {
			if blocked == nil {
				blocked = make(map[string]bool)
			}
			for _, k := range []string{a.Conc, a.Dedupe, a.Throttle} {
				if k != "" {
					blocked[k] = true
				}
			}
			continue
		}
		if a.Conc != "" {
			if askConc == nil {
				askConc = make(map[string]int)
			}
			askConc[a.Conc]++
		}
		if a.Dedupe != "" {
			if askDedupe == nil {
				askDedupe = make(map[string]bool, min(limit, len(parked)))
			}
			askDedupe[a.Dedupe] = true
		}
		w.ask = len(admits)
		admits = append(admits, *a)
	}
	return admits
}

// apply applies the store's answer to a round sent at sent (answered at now) and adds to acts
// what the engine is to do about it.
func (s *flowState) apply(q roundReq, sent, now time.Time, acts *flowActs) {
	s.applyReleases(q, acts)
	s.applyRenews(q, sent, acts)
	s.applyVerdicts(q, sent, acts)
	if s.slots < s.conc && len(q.r.Admits) > 0 {
		s.admitAt = now.Add(min(s.rtt, flowMaxLinger))
	}
}

// applyReleases passes on the decisions of the released deliveries. One whose dedupe key could
// not be marked done is left unsettled instead (the mark goes before the acknowledgement); a
// lease or claim that could not be let go expires by itself.
func (s *flowState) applyReleases(q roundReq, acts *flowActs) {
	relFaults := faultsByIndex(q.r.ReleaseFaults, len(q.rel))
	for i, fd := range q.rel {
		if t := s.running[fd.d]; t != nil {
			s.unhold(t.lease)
		}
		delete(s.running, fd.d)
		if fl := faultsAt(relFaults, i); len(fl) > 0 && !fd.failed {
			if q.r.Releases[i].Window > 0 && !fd.passed {
				acts.faults = append(acts.faults, flowFault{fd.d, fl, "flow control: marking a dedupe key done failed permanently: delivery left unsettled (not acknowledged), it comes back by its source's rules"})
				acts.unsettled = append(acts.unsettled, fd.dec)
				continue
			}
			acts.faults = append(acts.faults, flowFault{fd.d, fl, "flow control: releasing a lease failed permanently: the key stays taken until the lease expires"})
		}
		if !fd.returned && !fd.passed {
			acts.pass = append(acts.pass, fd.dec)
		}
	}
	// What finished during the round moves to the front, so the slice keeps its room: taking
	// the released ones off its front would shrink it, and every later append copy it anew.
	n := copy(s.releases, s.releases[len(q.rel):])
	clear(s.releases[n:])
	s.releases = s.releases[:n]
}

// applyRenews sets the next renewal and notes the renewals that failed or came too late.
func (s *flowState) applyRenews(q roundReq, sent time.Time, acts *flowActs) {
	if len(q.r.Renews) > 0 {
		s.renewAt = sent.Add(s.lease / 3)
		for i, fl := range faultsByIndex(q.r.RenewFaults, len(q.renewing)) {
			if len(fl) > 0 {
				acts.faults = append(acts.faults, flowFault{q.renewing[i], fl, "flow control: renewing a running delivery's lease failed permanently: it may expire while the handler runs, and its key run twice"})
			}
		}
		for _, i := range q.r.Lost {
			acts.lost = append(acts.lost, q.renewing[i])
		}
	}
	if len(s.running) == 0 {
		s.renewAt = time.Time{}
	}
}

// applyVerdicts acts on the store's answer to each asked admission: admitted ones start,
// duplicates are acknowledged, failed ones count as retry; the rest wait on.
func (s *flowState) applyVerdicts(q roundReq, sent time.Time, acts *flowActs) {
	progressed := false
	keep := s.parked[:0]
	admitFaults := faultsByIndex(q.r.AdmitFaults, q.asked)
	left := q.asked // asked deliveries not yet met: once all are, the rest is kept as it is
	for i, w := range s.parked {
		if left == 0 {
			keep = append(keep, s.parked[i:]...)
			break
		}
		if w.ask < 0 {
			keep = append(keep, w)
			continue
		}
		left--
		ask := w.ask
		w.ask = -1
		if fl := faultsAt(admitFaults, ask); len(fl) > 0 {
			progressed = true
			s.admitFailed(w, fl, sent, acts)
			continue
		}
		v := q.r.Verdicts[ask]
		switch v.Kind {
		case FlowAdmitted:
			progressed = true
			s.admitted(w, sent)
			acts.start = append(acts.start, w.d)
		case FlowDuplicate:
			progressed = true
			acts.dups = append(acts.dups, w.d)
		default:
			if v.RetryIn > 0 && v.RetryIn < s.poll {
				s.poll = max(v.RetryIn, time.Millisecond)
			}
			keep = append(keep, w)
		}
	}
	clear(s.parked[len(keep):])
	s.parked = keep
	if progressed {
		s.poll = flowPollMin
	}
}

// admitted holds an admitted delivery's lease (a late one asking again holds it already) and
// sets its start deadline.
func (s *flowState) admitted(w *flowWait, now time.Time) {
	t := s.running[w.d]
	if !w.again {
		t = s.ticket(w, now)
	}
	if t != nil {
		t.at, t.by = now, time.Time{}
		if s.slack > 0 {
			t.by = now.Add(s.slack)
		}
	}
	if s.renewAt.IsZero() && s.holds() {
		s.renewAt = now.Add(s.lease / 3)
	}
	s.slots--
}

// ticket records the lease a first admission of w took (admitted at at) and counts its keys as
// held here.
func (s *flowState) ticket(w *flowWait, at time.Time) *flowTicket {
	l := FlowLease{Token: w.admit.Token, Conc: w.admit.Conc, Dedupe: w.admit.Dedupe}
	w.ticket = flowTicket{at: at, lease: l, throttle: throttleOf(w.admit)}
	t := &w.ticket
	s.running[w.d] = t
	s.hold(l)
	return t
}

// admitFailed decides a delivery whose admission failed permanently (a flow key it needs can
// never be written): like a key expression that fails, it counts as retry, so the policy's
// backoff and attempt cap apply and nothing is lost; the part of its lease or claim that may
// have been taken is released first.
func (s *flowState) admitFailed(w *flowWait, fl []Fault, now time.Time, acts *flowActs) {
	acts.faults = append(acts.faults, flowFault{w.d, fl, "flow control: admission failed permanently: the delivery counts as retry"})
	if !w.again {
		s.ticket(w, now)
	}
	err := fmt.Errorf("flow control: %w", fl[0])
	dec := s.policy.Decide(w.d, Retry(), err, now)
	dec.Cause = err
	acts.failed = append(acts.failed, flowFailed{d: w.d, dec: dec, err: err})
	s.releases = append(s.releases, flowDone{d: w.d, dec: dec, failed: true})
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
