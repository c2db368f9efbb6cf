package workflow

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
)

// MemStore is a Store in the process's memory, for `flowrun test` and tests: what the Redis
// store does in one script, it does under one lock. Entered steps are recorded in order
// (Entered) so an offline runner can deliver them.
type MemStore struct {
	mu      sync.Mutex
	runs    map[string]*State
	order   []string // run ids in creation order
	entered []Entry
}

// Entry is a step a run entered: the message a store writes to the step's stream.
type Entry struct {
	Run   string
	Step  string
	Visit int
	// Transition is what entered it (its EnterDelay and EnterDeadline).
	Transition Transition
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return &MemStore{runs: map[string]*State{}} }

// Create writes a new run; false when a run with that id exists.
func (m *MemStore) Create(_ context.Context, st *State, t Transition) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.runs[st.ID]; ok {
		return false, nil
	}
	m.runs[st.ID] = st.clone()
	m.order = append(m.order, st.ID)
	if t.Enter != "" {
		m.entered = append(m.entered, Entry{Run: st.ID, Step: t.Enter, Visit: st.Visit, Transition: t})
	}
	return true, nil
}

// Apply applies t when the run's visit is still t.Visit.
func (m *MemStore) Apply(_ context.Context, t Transition) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.runs[t.Run]
	if !ok {
		return false, ErrNoRun
	}
	if !st.Apply(t) {
		return false, nil
	}
	if t.Enter != "" {
		m.entered = append(m.entered, Entry{Run: t.Run, Step: t.Enter, Visit: st.Visit, Transition: t})
	}
	return true, nil
}

// Get reads a copy of a run.
func (m *MemStore) Get(_ context.Context, id string) (*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.runs[id]
	if !ok {
		return nil, ErrNoRun
	}
	return st.clone(), nil
}

// List reads runs newest first (by creation), of status when it is not "", at most limit
// when limit > 0.
func (m *MemStore) List(_ context.Context, status Status, limit int) ([]*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*State
	for i := len(m.order) - 1; i >= 0; i-- {
		st := m.runs[m.order[i]]
		if status != "" && st.Status != status {
			continue
		}
		out = append(out, st.clone())
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

// Entered returns the steps entered so far, in order, and forgets them.
func (m *MemStore) Entered() []Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entered
	m.entered = nil
	return e
}

// clone copies a state deeply enough that the store's copy and the caller's do not share
// slices or maps.
func (st *State) clone() *State {
	c := *st
	c.Steps = maps.Clone(st.Steps)
	if c.Steps == nil {
		c.Steps = map[string]json.RawMessage{}
	}
	c.Finished = slices.Clone(st.Finished)
	c.Pending = slices.Clone(st.Pending)
	c.History = slices.Clone(st.History)
	return &c
}
