package engine

import (
	"sort"
	"sync"
	"time"
)

// States of a pipeline as the status page shows them (SPEC §15).
const (
	StateRunning = "running"
	StateWaiting = "waiting for Redis" // the source is not connected (Ready is false)
	StateStopped = "stopped"           // its input is done, it failed, or it was stopped
)

// PipelineStatus is one pipeline as the engine runs it, for the status page.
type PipelineStatus struct {
	Name    string
	State   string
	Started time.Time
	// Totals counts the outcomes since the pipeline started, by OutcomeLabels' labels.
	Totals map[string]int64
	// Rates is per outcome label per second over the last minute (since start when younger);
	// Rate is their sum.
	Rates    map[string]float64
	Rate     float64
	Inflight int64 // handlers running
	Held     int64 // runtime delayed copies held (retry_after, max_held)
}

// rateEvery is how often a runner keeps a snapshot of its totals; rateSlots of them span a minute.
const (
	rateEvery = 5 * time.Second
	rateSlots = int(time.Minute/rateEvery) + 1
)

// rateRing keeps the last minute of totals snapshots, for a rate over the last minute that
// needs no work per message.
type rateRing struct {
	mu    sync.Mutex
	at    [rateSlots]time.Time
	n     [rateSlots]Outcomes
	next  int
	count int
}

func (r *rateRing) add(at time.Time, t *tally) {
	o := t.snapshot()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at[r.next] = at
	r.n[r.next] = o
	r.next = (r.next + 1) % rateSlots
	r.count = min(r.count+1, rateSlots)
}

// oldest returns the oldest snapshot kept (false when there is none).
func (r *rateRing) oldest() (time.Time, Outcomes, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count == 0 {
		return time.Time{}, Outcomes{}, false
	}
	i := (r.next - r.count + rateSlots) % rateSlots
	return r.at[i], r.n[i], true
}

// snapshots keeps a totals snapshot every rateEvery until done is closed.
func (r *runner) snapshots(done <-chan struct{}) {
	t := time.NewTicker(rateEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			r.rates.add(now, &r.tally)
		}
	}
}

// Status reports the pipelines of the registry, in name order: those running or stopping, and
// those that ended on their own (input done, or failed), shown stopped until Stop or another
// of their name starts. A pipeline Stop stopped (a reload removed or changed it) is not shown.
func (e *Engine) Status() []PipelineStatus {
	rs := e.runners()
	sort.Slice(rs, func(i, j int) bool { return rs[i].p.Name < rs[j].p.Name })
	now := time.Now()
	out := make([]PipelineStatus, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.status(now))
	}
	return out
}

func (r *runner) status(now time.Time) PipelineStatus {
	s := PipelineStatus{
		Name:     r.p.Name,
		State:    StateRunning,
		Started:  r.tally.start,
		Totals:   make(map[string]int64, len(OutcomeLabels)),
		Rates:    make(map[string]float64, len(OutcomeLabels)),
		Inflight: r.tally.inflight.Load(),
		Held:     int64(r.gate.count()),
	}
	stopped := r.stopped.Load()
	switch {
	case stopped:
		s.State = StateStopped
	case !sourceReady(r.p.Source):
		s.State = StateWaiting
	}
	at, before, ok := r.rates.oldest()
	if !ok || now.Sub(at) > time.Minute+rateEvery {
		at, before = r.tally.start, Outcomes{}
	}
	secs := now.Sub(at).Seconds()
	o := r.tally.snapshot()
	for i, n := range o {
		l := Label(i).String()
		s.Totals[l] = n
		if secs > 0 && !stopped {
			rate := float64(n-before[i]) / secs
			s.Rates[l] = rate
			s.Rate += rate
		}
	}
	return s
}

func sourceReady(s Source) bool {
	r, ok := s.(interface{ Ready() bool })
	return !ok || r.Ready()
}
