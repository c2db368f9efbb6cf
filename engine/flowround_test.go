package engine

import (
	"slices"
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
