package engine

// Count adds one outcome l to the running pipeline name's totals, for a settlement the pipeline
// did not make itself: a wait step's event kept in Redis and expired there, counted rejected by
// whichever process dropped it (SPEC §16 "Waiting"). false when no pipeline of that name runs.
func (e *Engine) Count(name string, l Label) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.live(name)
	if x == nil || x.r == nil || x.drained {
		return false
	}
	x.r.tally.outcome(l)
	return true
}
