package redisrun

import (
	"maps"
	"sync"

	"github.com/flowrun/flowrun/workflow"
)

// maxKnown is how many runs a store's knownRuns holds in each of its two generations.
const maxKnown = 4096

// knownRuns are the runs this process moved into a step that has no effect but its outcome
// (StepOptions.Pure), each as the transition left it: that step's first delivery of the visit
// starts from it instead of a load. It is safe because a pure step's only effect is its
// transition, and applyScript checks the visit and the status again before applying it: a run
// cancelled, timed out or moved on meanwhile changes nothing. Bounded by two generations: when
// the newer fills up, the older is dropped (runs whose next step another process read are never
// taken, and age out).
type knownRuns struct {
	mu       sync.Mutex
	pure     map[string]bool // the steps whose source has StepOptions.Pure
	cur, old map[string]*workflow.State
}

// allow makes step one whose deliveries may start from a known run.
func (k *knownRuns) allow(step string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pure == nil {
		k.pure = map[string]bool{}
	}
	k.pure[step] = true
}

// put keeps st, the run as a transition this process applied left it, when it is at a pure
// step. st.Steps is every output of the run, or nil when they were not all known.
func (k *knownRuns) put(st *workflow.State) {
	if st == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.pure[st.Step] {
		return
	}
	if k.cur == nil {
		k.cur = make(map[string]*workflow.State, 64)
	}
	if len(k.cur) >= maxKnown {
		k.old, k.cur = k.cur, make(map[string]*workflow.State, maxKnown/4)
	}
	k.cur[st.ID] = st
}

// take removes run id and returns it as this process left it, when it left it at visit.
func (k *knownRuns) take(id string, visit int) *workflow.State {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range [2]map[string]*workflow.State{k.cur, k.old} {
		if st, ok := m[id]; ok {
			delete(m, id)
			if st.Visit == visit {
				return st
			}
			return nil
		}
	}
	return nil
}

// after is prev with t applied, a copy (prev may be shared by other deliveries of its batch);
// nil when t does not apply to prev. Its Steps are nil unless prev's were every output.
func after(prev *workflow.State, t workflow.Transition) *workflow.State {
	st := *prev
	st.Steps = maps.Clone(prev.Steps)
	st.History = nil
	if !st.Apply(t) {
		return nil
	}
	if prev.Steps == nil {
		st.Steps = nil // only this output: not the run's outputs
	}
	return &st
}
