package engine

import "sync"

// handoff carries decisions from the workers (and flow control) to the settler. It replaces a
// channel of Decision: a channel copied the large Decision into its buffer and out again and
// took its lock on both sides for every message, and the settler then copied each into its
// batch. Here a worker appends a decision to the pending slice under a lock (one copy) and the
// settler takes the whole slice at once, swapping in its own emptied batch; the settler is
// woken only when the slice goes from empty to not, not per message.
//
// It keeps the channel's guarantees: decisions reach the settler in the order they were put,
// at most limit wait (a put waits for room, so workers, and then reading, pause while the
// settler is busy or holds back), and close ends the settler's intake once the last put is in.
type handoff struct {
	limit int

	mu      sync.Mutex
	room    sync.Cond // puts wait here while limit decisions wait
	waiting int       // puts waiting on room
	pending []Decision
	closed  bool
	// ready has a value when pending may have become non-empty (or closed) since the settler
	// last looked: the settler selects on it together with its timers and the stop.
	ready chan struct{}
}

func newHandoff(limit int) *handoff {
	h := &handoff{limit: max(limit, 1), ready: make(chan struct{}, 1),
		pending: make([]Decision, 0, max(limit, 1))}
	h.room.L = &h.mu
	return h
}

// put hands one decision on, waiting while limit wait.
func (h *handoff) put(dec *Decision) {
	h.mu.Lock()
	first := h.putLocked(dec)
	h.mu.Unlock()
	if first {
		h.notify()
	}
}

// putAll hands decs on in order, under one lock while there is room.
func (h *handoff) putAll(decs []Decision) {
	h.mu.Lock()
	first := false
	for i := range decs {
		// A put that waits for room lets the settler take what is in: wake it first.
		if len(h.pending) >= h.limit && first {
			h.notify()
			first = false
		}
		first = h.putLocked(&decs[i]) || first
	}
	h.mu.Unlock()
	if first {
		h.notify()
	}
}

// putLocked appends dec, waiting for room first; first reports that pending was empty, so the
// caller wakes the settler, after unlocking (woken under the lock, it would wait for it).
func (h *handoff) putLocked(dec *Decision) (first bool) {
	for len(h.pending) >= h.limit && !h.closed {
		h.waiting++
		h.room.Wait()
		h.waiting--
	}
	h.pending = append(h.pending, *dec)
	return len(h.pending) == 1
}

func (h *handoff) notify() {
	select {
	case h.ready <- struct{}{}:
	default: // the settler has a wake already
	}
}

// close says no more decisions come: the settler takes what is left, then ends.
func (h *handoff) close() {
	h.mu.Lock()
	h.closed = true
	h.room.Broadcast()
	h.mu.Unlock()
	h.notify()
}

// take returns what waits, swapping in spare (emptied, its room reused) as the next pending
// slice; closed reports that the handoff is closed: nothing comes after what take returned.
func (h *handoff) take(spare []Decision) (decs []Decision, closed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pending) == 0 {
		return spare[:0], h.closed // a wake whose decisions an earlier take had: keep spare
	}
	decs, h.pending = h.pending, spare[:0]
	if h.waiting > 0 {
		h.room.Broadcast()
	}
	return decs, h.closed
}
