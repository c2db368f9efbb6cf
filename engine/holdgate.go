package engine

import "sync"

// holdGate counts runtime delayed copies from the moment a worker decides one until it is
// written (or given up), and makes workers wait before taking another delivery while the count
// is at max_held. Since a source hands out a delivery only when a worker takes one, reading
// pauses within one batch of the bound, and memory stays flat however many messages ask for a
// delay.
type holdGate struct {
	max int

	mu   sync.Mutex
	n    int
	room chan struct{} // closed when n drops below max; nil while there is room
}

func newHoldGate(max int) *holdGate {
	if max <= 0 {
		max = DefaultMaxHeld
	}
	return &holdGate{max: max}
}

// add changes the count by delta.
func (g *holdGate) add(delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n += delta
	if g.n < 0 {
		g.n = 0
	}
	if g.n < g.max && g.room != nil {
		close(g.room)
		g.room = nil
	}
}

// full returns a channel to wait on when the bound is reached, or nil when there is room.
func (g *holdGate) full() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n < g.max {
		return nil
	}
	if g.room == nil {
		g.room = make(chan struct{})
	}
	return g.room
}

// count is how many copies are held now.
func (g *holdGate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}
