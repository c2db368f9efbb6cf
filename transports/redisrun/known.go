package redisrun

import (
	"maps"
	"sync"
	"time"

	"github.com/flowrun/flowrun/workflow"
)

// Bounds of a store's knownRuns: at most knownBytes of runs (as knownSize counts them), none
// kept longer than twice knownAge.
const (
	knownBytes = 8 << 20
	knownAge   = 30 * time.Second
)

// knownRuns are the runs this process moved into a step that has no effect but its outcome
// (StepOptions.Pure), each as the transition left it: that step's first delivery of the visit
// starts from it instead of a load. It is safe because a pure step's only effect is its
// transition, and applyScript checks the visit and the status again before applying it: a run
// cancelled or moved on meanwhile changes nothing. It holds two generations, each of at most
// half of knownBytes and knownAge: a new one begins when the current is full or that old, and
// the one before it is dropped, so a run never taken here (another process read its step)
// ages out. (Keeping the oldest when full does worse under a backlog: the start, which runs
// ahead of the steps, takes whatever room a step's read frees, and the steps after it miss.)
type knownRuns struct {
	mu       sync.Mutex
	pure     map[string]bool // the steps whose source has StepOptions.Pure
	cur, old generation
	since    time.Time // when cur began
}

// generation is the runs kept in one knownAge, and their size.
type generation struct {
	runs  map[string]*workflow.State
	bytes int
}

// knownSize is about what st holds in memory: the state and its map entries, the input and the
// outputs.
func knownSize(st *workflow.State) int {
	n := 1024 + len(st.Input)
	for _, v := range st.Steps {
		n += len(v)
	}
	return n
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
	now, n := time.Now(), knownSize(st)
	if k.cur.runs == nil || now.Sub(k.since) >= knownAge || k.cur.bytes+n > knownBytes/2 {
		k.old, k.cur, k.since = k.cur, generation{runs: make(map[string]*workflow.State, 64)}, now
	}
	k.cur.runs[st.ID] = st
	k.cur.bytes += n
}

// take removes run id and returns it as this process left it, when it left it at visit.
func (k *knownRuns) take(id string, visit int) *workflow.State {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, g := range [2]*generation{&k.cur, &k.old} {
		if st, ok := g.runs[id]; ok {
			delete(g.runs, id)
			g.bytes -= knownSize(st)
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
