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
	n     [rateSlots][len(tally{}.outcomes)]int64
	next  int
	count int
}

func (r *rateRing) add(at time.Time, t *tally) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at[r.next] = at
	for i := range t.outcomes {
		r.n[r.next][i] = t.outcomes[i].Load()
	}
	r.next = (r.next + 1) % rateSlots
	r.count = min(r.count+1, rateSlots)
}

// oldest returns the oldest snapshot kept (false when there is none).
func (r *rateRing) oldest() (time.Time, [len(tally{}.outcomes)]int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count == 0 {
		return time.Time{}, [len(tally{}.outcomes)]int64{}, false
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

// register records r as the running runner of its pipeline, replacing one that stopped.
func (e *Engine) register(r *runner) {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.runners == nil {
		e.runners = map[string]*runner{}
	}
	e.runners[r.p.Name] = r
}

// unregister forgets the stopped runner of a pipeline Stop stopped.
func (e *Engine) unregister(name string) {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if r := e.runners[name]; r != nil && r.stopped.Load() {
		delete(e.runners, name)
	}
}

// Status reports every pipeline this engine has started, in name order: one that stopped stays
// until another of its name starts.
func (e *Engine) Status() []PipelineStatus {
	e.runMu.Lock()
	rs := make([]*runner, 0, len(e.runners))
	for _, r := range e.runners {
		rs = append(rs, r)
	}
	e.runMu.Unlock()
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
	switch {
	case r.stopped.Load():
		s.State = StateStopped
	case !sourceReady(r.p.Source):
		s.State = StateWaiting
	}
	at, before, ok := r.rates.oldest()
	if !ok || now.Sub(at) > time.Minute+rateEvery {
		at, before = r.tally.start, [len(tally{}.outcomes)]int64{}
	}
	secs := now.Sub(at).Seconds()
	for i, l := range OutcomeLabels {
		if i >= len(r.tally.outcomes) {
			break
		}
		n := r.tally.outcomes[i].Load()
		s.Totals[l] = n
		if secs > 0 && !r.stopped.Load() {
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
