package engine

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func waits(as ...FlowAdmit) []*flowWait {
	ws := make([]*flowWait, len(as))
	for i, a := range as {
		ws[i] = &flowWait{admit: a, ask: 99}
	}
	return ws
}

func asks(ws []*flowWait) []int {
	out := make([]int, len(ws))
	for i, w := range ws {
		out[i] = w.ask
	}
	return out
}

// chooseAdmits asks for waiting deliveries in order, skipping a key this process holds (less
// what the round releases) and every later delivery sharing a key with a skipped one, and asks
// for at most twice what may be granted.
func TestChooseAdmits(t *testing.T) {
	c := func(k string, limit int) FlowAdmit { return FlowAdmit{Token: k, Conc: k, ConcLimit: limit} }
	tests := []struct {
		name       string
		parked     []*flowWait
		rel        []FlowRelease
		heldConc   map[string]int
		heldDedupe map[string]bool
		grant      int
		want       []int
	}{
		{"all free", waits(c("c:a", 1), c("c:b", 1)), nil, nil, nil, 10, []int{0, 1}},
		{"held at its limit", waits(c("c:a", 1), c("c:b", 1)), nil, map[string]int{"c:a": 1}, nil, 10, []int{-1, 0}},
		{"held but released this round", waits(c("c:a", 1)), []FlowRelease{{FlowLease: FlowLease{Conc: "c:a"}}}, map[string]int{"c:a": 1}, nil, 10, []int{0}},
		{"earlier candidate takes the last place", waits(c("c:a", 2), c("c:a", 2), c("c:a", 2)), nil, map[string]int{"c:a": 1}, nil, 10, []int{0, -1, -1}},
		{"one dedupe claim per round", waits(FlowAdmit{Dedupe: "d:x"}, FlowAdmit{Dedupe: "d:x"}, FlowAdmit{Dedupe: "d:y"}), nil, nil, nil, 10, []int{0, -1, 1}},
		{"claim held until released", waits(FlowAdmit{Dedupe: "d:x"}), nil, nil, map[string]bool{"d:x": true}, 10, []int{-1}},
		{"claim released this round", waits(FlowAdmit{Dedupe: "d:x"}), []FlowRelease{{FlowLease: FlowLease{Dedupe: "d:x"}}}, nil, map[string]bool{"d:x": true}, 10, []int{0}},
		{"order per key: a blocked one's throttle key waits too",
			waits(FlowAdmit{Conc: "c:a", ConcLimit: 1, Throttle: "t:k"}, FlowAdmit{Throttle: "t:k"}, FlowAdmit{Throttle: "t:j"}),
			nil, map[string]int{"c:a": 1}, nil, 10, []int{-1, -1, 0}},
		{"twice the grant at most", waits(c("c:1", 1), c("c:2", 1), c("c:3", 1), c("c:4", 1)), nil, nil, nil, 1, []int{0, 1, -1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chooseAdmits(tt.parked, tt.rel, tt.heldConc, tt.heldDedupe, tt.grant)
			if a := asks(tt.parked); !slices.Equal(a, tt.want) {
				t.Fatalf("asks %v, want %v", a, tt.want)
			}
			for _, w := range tt.parked {
				if w.ask >= 0 && got[w.ask] != w.admit {
					t.Fatalf("admission %d is %+v, want %+v", w.ask, got[w.ask], w.admit)
				}
			}
		})
	}
}

// request releases finished leases (a dedupe key marked done for a window only after an ack or
// drop), renews every running lease once renewals are due, and asks for admissions only when
// told to.
func TestFlowRequest(t *testing.T) {
	now := time.Now()
	done, failed, waiting := &Delivery{}, &Delivery{}, &Delivery{}
	fs := &flowState{
		conc: 2, f: &Flow{Dedupe: &Dedupe{Window: time.Minute}}, lease: time.Second,
		running: map[*Delivery]*flowTicket{
			done:   {lease: FlowLease{Token: "1", Dedupe: "d:a"}},
			failed: {lease: FlowLease{Token: "2", Dedupe: "d:b"}},
		},
		releases: []flowDone{{d: done, dec: Decision{Label: OutcomeAck}}, {d: failed, dec: Decision{Label: OutcomeRetry}}},
		parked:   waits(FlowAdmit{Token: "3", Dedupe: "d:c"}),
		slots:    2,
	}
	fs.parked[0].d = waiting
	q := fs.request(now, false)
	if len(q.r.Releases) != 2 || q.r.Releases[0].Window != time.Minute || q.r.Releases[1].Window != 0 {
		t.Fatalf("releases %+v: want d:a marked done for the window, d:b let go", q.r.Releases)
	}
	if len(q.r.Renews) != 0 || len(q.r.Admits) != 0 || q.asked != 0 {
		t.Fatalf("renews %v admits %v: want none (no renewal due, not admitting)", q.r.Renews, q.r.Admits)
	}
	fs.renewAt = now.Add(-time.Millisecond)
	q = fs.request(now, true)
	if len(q.r.Renews) != 2 || len(q.renewing) != 2 {
		t.Fatalf("renews %v: want both running leases", q.r.Renews)
	}
	if q.r.Max != 2 || q.asked != 1 || q.r.Admits[0].Token != "3" || fs.parked[0].ask != 0 {
		t.Fatalf("max %d admits %+v: want the waiting delivery asked, up to the 2 free slots", q.r.Max, q.r.Admits)
	}
	fs.releases = make([]flowDone, flowMaxRound+1)
	for i := range fs.releases {
		fs.releases[i].d = done
	}
	if q = fs.request(now, false); len(q.rel) != flowMaxRound {
		t.Fatalf("%d releases in one round, want at most %d", len(q.rel), flowMaxRound)
	}
}

// newTestState is a flowState for a pipeline of conc handlers and a queue of queued.
func newTestState(f *Flow, conc, queued int) *flowState {
	return newFlowState(f, &Policy{}, conc, queued)
}

// Admissions a round may grant: without a throttle every handler and every queued delivery;
// a throttle with a useful slack (period/32) four times the handlers; a short period only the
// handlers.
func TestNewFlowStateSlots(t *testing.T) {
	tests := []struct {
		name        string
		f           *Flow
		slots       int
		slack       time.Duration
		retryMaxCap time.Duration
	}{
		{"concurrency key", &Flow{Concurrency: &ConcurrencyKey{Limit: 1}}, 8 + 100, 0, flowRetryMax},
		{"throttle with slack", &Flow{Throttle: &Throttle{Limit: 10, Period: 320 * time.Millisecond}}, 4 * 8, 10 * time.Millisecond, flowRetryMax},
		{"short throttle", &Flow{Throttle: &Throttle{Limit: 10, Period: 20 * time.Millisecond}}, 8, 0, flowRetryMax},
		{"short lease caps the backoff", &Flow{Dedupe: &Dedupe{}, Lease: 400 * time.Millisecond}, 8 + 100, 0, flowRetryMin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestState(tt.f, 8, 100)
			if s.slots != tt.slots || s.slack != tt.slack {
				t.Fatalf("slots %d slack %v, want %d and %v", s.slots, s.slack, tt.slots, tt.slack)
			}
			if s.retry.Max > tt.retryMaxCap || s.lease <= 0 {
				t.Fatalf("retry max %v (want at most %v), lease %v", s.retry.Max, tt.retryMaxCap, s.lease)
			}
		})
	}
}

// flowAdmit names each key by its kind and computes it from the delivery; a throttle without a
// key shares one budget, and its window is the period plus the slack.
func TestFlowAdmitKeys(t *testing.T) {
	d := &Delivery{Message: Message{Headers: map[string]string{"k": "v"}}}
	f := &Flow{
		Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 2},
		Throttle:    &Throttle{Limit: 5, Period: time.Second},
		Dedupe:      &Dedupe{Key: headerKey("k")},
	}
	a, err := flowAdmit(f, 10*time.Millisecond, "tok", d)
	want := FlowAdmit{Token: "tok", Dedupe: "d:v", Conc: "c:v", ConcLimit: 2, Throttle: "t", ThrottleLimit: 5, Period: time.Second + 10*time.Millisecond}
	if err != nil || a != want {
		t.Fatalf("got %+v, %v; want %+v", a, err, want)
	}
	f.Throttle.Key = headerKey("k")
	if a, _ := flowAdmit(f, 0, "tok", d); a.Throttle != "t:v" {
		t.Fatalf("keyed throttle %q, want t:v", a.Throttle)
	}
	if _, err := flowAdmit(f, 0, "tok", &Delivery{}); err == nil || !strings.Contains(err.Error(), "dedupe key") {
		t.Fatalf("a key that fails: %v, want the dedupe key's error", err)
	}
}

// apply hands on the decisions of released deliveries, leaves unsettled the ack whose done mark
// failed, notes renewals that failed or came too late, starts admitted deliveries holding their
// keys, acknowledges duplicates, decides failed admissions as retry (their release queued), and
// keeps the rest waiting with the shortest poll the store suggests.
func TestFlowApply(t *testing.T) {
	now := time.Now()
	s := newTestState(&Flow{Dedupe: &Dedupe{Window: time.Minute}, Concurrency: &ConcurrencyKey{Limit: 1}}, 4, 0)
	ok, bad, runner := &Delivery{}, &Delivery{}, &Delivery{}
	s.running[ok] = &flowTicket{lease: FlowLease{Token: "1", Dedupe: "d:ok"}}
	s.running[bad] = &flowTicket{lease: FlowLease{Token: "2", Dedupe: "d:bad"}}
	s.running[runner] = &flowTicket{lease: FlowLease{Token: "3", Conc: "c:r"}}
	s.hold(s.running[ok].lease)
	s.hold(s.running[bad].lease)
	s.hold(s.running[runner].lease)
	s.releases = []flowDone{{d: ok, dec: Decision{Label: OutcomeAck}}, {d: bad, dec: Decision{Label: OutcomeAck}}}
	s.renewAt = now
	s.parked = waits(
		FlowAdmit{Token: "a", Conc: "c:a", ConcLimit: 1},
		FlowAdmit{Token: "b", Dedupe: "d:b"},
		FlowAdmit{Token: "c", Conc: "c:c", ConcLimit: 1},
		FlowAdmit{Token: "e", Conc: "c:e", ConcLimit: 1},
	)
	for _, w := range s.parked {
		w.d = &Delivery{Message: Message{ID: w.admit.Token}}
	}
	q := s.request(now, true)
	if len(q.r.Releases) != 2 || len(q.r.Renews) != 3 || q.asked != 4 {
		t.Fatalf("request: %d releases, %d renews, %d asked", len(q.r.Releases), len(q.r.Renews), q.asked)
	}
	q.r.ReleaseFaults = []Fault{{Index: 1, Reason: "noperm", Permanent: true}}
	var runnerAt int
	for i, d := range q.renewing {
		if d == runner {
			runnerAt = i
		}
	}
	q.r.Lost = []int{runnerAt}
	q.r.Verdicts = []FlowVerdict{{Kind: FlowAdmitted}, {Kind: FlowDuplicate}, {Kind: FlowWait, RetryIn: 500 * time.Microsecond}, {Kind: FlowWait}}
	q.r.AdmitFaults = []Fault{{Index: 3, Reason: "wrongtype", Permanent: true}}
	var acts flowActs
	s.apply(q, now, now.Add(time.Millisecond), &acts)

	if len(acts.pass) != 1 || len(acts.unsettled) != 1 {
		t.Fatalf("passed %d, unsettled %d: want the ack marked done passed, the other left unsettled", len(acts.pass), len(acts.unsettled))
	}
	if len(acts.faults) != 2 || len(acts.lost) != 1 || acts.lost[0] != runner {
		t.Fatalf("faults %d (want the mark and the admission), lost %v", len(acts.faults), acts.lost)
	}
	if len(acts.start) != 1 || acts.start[0].ID != "a" || s.running[acts.start[0]] == nil || s.localConc["c:a"] != 1 {
		t.Fatalf("started %v: want a, running and holding c:a", acts.start)
	}
	if len(acts.dups) != 1 || acts.dups[0].ID != "b" {
		t.Fatalf("duplicates %v, want b", acts.dups)
	}
	if len(acts.failed) != 1 || acts.failed[0].d.ID != "e" || acts.failed[0].dec.Label != OutcomeRetry {
		t.Fatalf("failed %+v, want e decided as retry", acts.failed)
	}
	if len(s.releases) != 1 || !s.releases[0].failed || s.localConc["c:e"] != 1 {
		t.Fatalf("releases %+v: want the failed admission's lease queued for release", s.releases)
	}
	if len(s.parked) != 1 || s.parked[0].d.ID != "c" || s.parked[0].ask != -1 {
		t.Fatalf("still waiting %v, want c (not asked)", s.parked)
	}
	if s.poll != flowPollMin {
		t.Fatalf("poll %v: progress resets it to %v", s.poll, flowPollMin)
	}
	if s.running[ok] != nil || s.running[bad] != nil || s.localDedupe["d:ok"] || s.renewAt != now.Add(s.lease/3) {
		t.Fatalf("released leases still held, or renewal not set: %v", s.renewAt)
	}
	if acts.unheld() != 2 || s.slots != 4+0-1 {
		t.Fatalf("unheld %d (want the duplicate and the failure), slots %d (want 3)", acts.unheld(), s.slots)
	}
}

// A wait the store says ends soon polls sooner; nothing else changes.
func TestFlowApplyWaitPolls(t *testing.T) {
	s := newTestState(&Flow{Concurrency: &ConcurrencyKey{Limit: 1}}, 1, 0)
	s.parked = waits(FlowAdmit{Token: "a", Conc: "c:a", ConcLimit: 1})
	s.parked[0].d = &Delivery{}
	s.nextPoll()
	s.nextPoll() // 8ms now
	q := s.request(time.Now(), true)
	q.r.Verdicts = []FlowVerdict{{Kind: FlowWait, RetryIn: 3 * time.Millisecond}}
	var acts flowActs
	if s.apply(q, time.Now(), time.Now(), &acts); len(acts.start)+len(acts.dups)+len(acts.failed) != 0 || s.poll != 3*time.Millisecond {
		t.Fatalf("acts %+v, poll %v: want it waiting, polled after 3ms", acts, s.poll)
	}
}

// finished hands a decision on at once without dedupe (its release follows), holds it for the
// release with dedupe, and passes a concurrency lease straight to the next waiting delivery of
// its key unless a round out may be admitting it, a stop came, or it passed flowMaxHandoff
// times.
func TestFlowFinished(t *testing.T) {
	now := time.Now()
	conc := func() (*flowState, *Delivery, *Delivery) {
		s := newTestState(&Flow{Concurrency: &ConcurrencyKey{Limit: 1}}, 2, 0)
		done, next := &Delivery{}, &Delivery{}
		s.running[done] = &flowTicket{at: now, lease: FlowLease{Token: "1", Conc: "c:a"}}
		s.parked = []*flowWait{{d: next, admit: FlowAdmit{Token: "2", Conc: "c:a", ConcLimit: 1}, ask: -1}}
		s.slots = 1
		return s, done, next
	}
	s, done, next := conc()
	pass, got := s.finished(flowDone{d: done}, now, false)
	if !pass || got != next || len(s.parked) != 0 || s.running[next].lease.Token != "1" || s.running[next].handoffs != 1 || len(s.releases) != 0 || s.slots != 1 {
		t.Fatalf("pass %v next %v: want the decision passed and the lease handed to the next delivery", pass, got)
	}
	s, done, _ = conc()
	s.parked[0].ask = 0
	if _, got := s.finished(flowDone{d: done}, now, true); got != nil || len(s.releases) != 1 {
		t.Fatalf("handed off to a delivery a round out is asking for")
	}
	s, done, _ = conc()
	s.stopped = true
	if _, got := s.finished(flowDone{d: done}, now, false); got != nil {
		t.Fatal("handed off after a stop")
	}
	s, done, _ = conc()
	s.running[done].handoffs = flowMaxHandoff
	if _, got := s.finished(flowDone{d: done}, now, false); got != nil || len(s.releases) != 1 {
		t.Fatal("handed off past flowMaxHandoff")
	}
	d := newTestState(&Flow{Dedupe: &Dedupe{Window: time.Minute}}, 2, 0)
	x := &Delivery{}
	d.running[x] = &flowTicket{at: now, lease: FlowLease{Token: "1", Dedupe: "d:x"}}
	if pass, _ := d.finished(flowDone{d: x, dec: Decision{Label: OutcomeAck}}, now, false); pass || len(d.releases) != 1 || d.releases[0].passed {
		t.Fatal("with dedupe, a decision goes on only after its release")
	}
}

// A throttled delivery taken after its start deadline goes back first in line, asking only for
// its throttle again (it keeps its lease and claim), and the extra admissions stop.
func TestFlowLate(t *testing.T) {
	s := newTestState(&Flow{Throttle: &Throttle{Limit: 10, Period: 320 * time.Millisecond}, Concurrency: &ConcurrencyKey{Limit: 1}}, 2, 0)
	d := &Delivery{}
	s.running[d] = &flowTicket{lease: FlowLease{Token: "1", Conc: "c:a"}, throttle: throttleOf(FlowAdmit{Token: "1", Conc: "c:a", ConcLimit: 1, Throttle: "t", ThrottleLimit: 10, Period: time.Second})}
	s.parked = waits(FlowAdmit{Token: "2"})
	s.slots = 0
	s.late(d)
	w := s.parked[0]
	if w.d != d || !w.again || w.admit.Conc != "" || w.admit.Throttle != "t" || w.admit.Token != "1" || len(s.parked) != 2 {
		t.Fatalf("parked %+v: want it first, asking again for its throttle only", w)
	}
	if s.slots != 1 || s.admitMax() != 1-flowExtra*2 {
		t.Fatalf("slots %d, admitMax %d: want its slot back and no extra admissions", s.slots, s.admitMax())
	}
	q := s.request(time.Now(), true)
	if len(q.r.Admits) != 0 {
		t.Fatalf("asked %v with no slot free", q.r.Admits)
	}
}

// Failed rounds back off from flowRetryMin, logged once; a round answered resets the backoff
// and says the store recovered.
func TestFlowRoundFailedBacksOff(t *testing.T) {
	s := newTestState(&Flow{Concurrency: &ConcurrencyKey{Limit: 1}}, 1, 0)
	now := time.Now()
	s.admitAt = now
	if !s.roundFailed(now) || s.retryAt != now.Add(flowRetryMin) || !s.admitAt.IsZero() {
		t.Fatalf("first failure: retry at %v", s.retryAt.Sub(now))
	}
	if s.roundFailed(now) || s.retryAt != now.Add(2*flowRetryMin) {
		t.Fatalf("second failure: logged again, or retry at %v", s.retryAt.Sub(now))
	}
	if !s.roundDone(now, now.Add(time.Millisecond)) || s.rtt != time.Millisecond || s.retry.Wait() != flowRetryMin {
		t.Fatal("a round answered: want recovered, the rtt noted and the backoff reset")
	}
	if s.roundDone(now, now) {
		t.Fatal("recovered twice")
	}
}

// At the end of the grace period, decisions still waiting for their release go on, but an ack
// whose dedupe key was not marked done is left unsettled; returned and passed ones are dropped.
func TestFlowFlushUnreleased(t *testing.T) {
	s := newTestState(&Flow{Dedupe: &Dedupe{Window: time.Minute}}, 1, 0)
	s.releases = []flowDone{
		{d: &Delivery{}, dec: Decision{Label: OutcomeAck}},
		{d: &Delivery{}, dec: Decision{Label: OutcomeRetry}},
		{d: &Delivery{}, returned: true},
		{d: &Delivery{}, passed: true},
	}
	pass, unsettled := s.flushUnreleased()
	if len(pass) != 1 || pass[0].dec.Label != OutcomeRetry || len(unsettled) != 1 || unsettled[0].dec.Label != OutcomeAck || s.releases != nil {
		t.Fatalf("pass %v unsettled %v", pass, unsettled)
	}
}

// A throttle without a slack lingers for more handlers while some run and more wait than are
// free, up to the admitAt the last round set; never with a slack, nothing running, or a renewal
// due.
func TestFlowLinger(t *testing.T) {
	now := time.Now()
	s := newTestState(&Flow{Throttle: &Throttle{Limit: 2, Period: 20 * time.Millisecond}}, 4, 0)
	s.parked = waits(FlowAdmit{}, FlowAdmit{}, FlowAdmit{})
	s.slots = 1
	s.admitAt = now.Add(time.Millisecond)
	if l := s.linger(now, true); l != time.Millisecond {
		t.Fatalf("linger %v, want 1ms", l)
	}
	if s.linger(now, false) != 0 {
		t.Fatal("lingered while not admitting")
	}
	s.renewAt = now
	if s.linger(now, true) != 0 {
		t.Fatal("lingered with a renewal due")
	}
	s.renewAt = time.Time{}
	s.slots = 4
	if s.linger(now, true) != 0 {
		t.Fatal("lingered with every handler free")
	}
}
