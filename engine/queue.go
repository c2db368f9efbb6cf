package engine

import (
	"context"
	"runtime"
	"sync"
)

// Feed is how a source hands deliveries to the engine (Source.Receive).
type Feed interface {
	// Room waits until the engine can take more deliveries and returns how many: at least half
	// of what it holds at most, or everything it could hold when it is empty. It returns 0 once
	// ctx has ended. A source that reads no more than Room before its next Push is never more
	// than one batch ahead of the handlers (SPEC §11).
	Room(ctx context.Context) int
	// RoomFor is Room that waits until the engine can take at least n more (at most
	// everything it could hold): for a source with reads in flight that count against Room.
	RoomFor(ctx context.Context, n int) int
	// Push hands ds over, in order; the engine owns them from then on. It waits while the
	// engine is full (a source that asked Room never waits), and returns false, handing
	// nothing over, once ctx has ended. It may run the handler of a few deliveries itself
	// before it returns (a rule set while every worker is idle, see Queue.SetInline; under
	// flow control after sending their store round), so a source holds none of its own locks
	// across it; their settlements still come from the settler's goroutine.
	Push(ctx context.Context, ds []*Delivery) bool
}

// Queue is the engine's Feed: it holds up to limit deliveries that no worker has taken yet, and
// a worker takes the next one under a lock, with no channel operation per message. A source
// pushes straight into it, so a delivery goes from the source's read to a worker in one hop.
// Under flow control (SPEC §13) a pushed delivery is admitted first: it waits in the queue,
// parked by its flowGate, until its keys or its throttle let it start, and workers take only
// admitted deliveries.
type Queue struct {
	limit int

	mu      sync.Mutex
	ready   sync.Cond // workers wait here for a delivery
	room    sync.Cond // sources wait here for room
	items   []*Delivery
	head    int
	waiting int // workers waiting on ready
	// waking counts the workers signalled on ready that have not yet run (under flow
	// control, see wakeLocked).
	waking int
	closed bool
	// want is the room a waiting RoomFor asks for (0: none waits), so take wakes it just then.
	want int
	// held counts the deliveries parked by flow, waiting for their admission: they count
	// against the limit, so reading does not run ahead.
	held int
	// flow, when set (newFlowGate), is the admission step: items holds only admitted
	// deliveries.
	flow *flowGate

	// inline, when set (SetInline), runs the handlers of a push's first deliveries on the
	// goroutine that pushes them, while all of workers wait for deliveries; it returns how many
	// it ran (the rest are queued).
	inline  func(ds []*Delivery) int
	workers int
}

// inlineMax is the most deliveries of one push that Push runs on the pushing goroutine.
const inlineMax = 4

// NewQueue returns a Queue holding up to limit deliveries (at least 1).
func NewQueue(limit int) *Queue {
	q := &Queue{limit: max(limit, 1)}
	q.ready.L, q.room.L = &q.mu, &q.mu
	return q
}

func (q *Queue) len() int { return len(q.items) - q.head }

// used is what counts against the limit: queued plus parked.
func (q *Queue) used() int { return q.len() + q.held }

// Room implements Feed.
func (q *Queue) Room(ctx context.Context) int { return q.RoomFor(ctx, (q.limit+1)/2) }

// RoomFor implements Feed.
func (q *Queue) RoomFor(ctx context.Context, n int) int {
	n = min(max(n, 1), q.limit)
	q.mu.Lock()
	defer q.mu.Unlock()
	if free := q.limit - q.used(); free >= n && ctx.Err() == nil {
		return free // the common case: no stop hook to set up (an allocation per read)
	}
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.room.Broadcast()
		q.mu.Unlock()
	})
	defer stop()
	q.want = n
	defer func() { q.want = 0 }()
	for {
		if ctx.Err() != nil {
			return 0
		}
		if free := q.limit - q.used(); free >= n {
			return free
		}
		q.room.Wait()
	}
}

// SetInline lets Push run a push of up to inlineMax deliveries itself, through run (in order,
// while it may; it returns how many it ran), when the queue is empty and all of workers wait: at
// low rates a message then goes from the source's read to its handler without waking a second
// thread, a hand-over that on a busy machine now and then waits hundreds of microseconds for a
// CPU. Only for handlers that never block (Inliner), since the source reads nothing while they
// run, and only for a Feed pushed to from one goroutine (a source's Receive), so at most workers
// handlers run at once. Under flow control the push sends its store round first and runs what
// it admitted (flowGate.push). Call it before the first Push.
func (q *Queue) SetInline(workers int, run func(ds []*Delivery) int) {
	q.workers, q.inline = workers, run
}

// Push implements Feed.
func (q *Queue) Push(ctx context.Context, ds []*Delivery) bool {
	if ctx.Err() != nil {
		return false
	}
	if q.flow != nil {
		return q.flow.push(ctx, ds)
	}
	if ds = q.runInline(ds); len(ds) == 0 {
		return true
	}
	woke, ok := q.push(ctx, ds)
	if woke {
		// Let a worker just woken run now, on this thread, rather than after the source has
		// sent its next read and blocked: the hand-over is most of a message's wait at low
		// rates. The source goes on on another thread, or right after.
		runtime.Gosched()
	}
	return ok
}

// runInline runs ds through inline, in order, while it may, and returns what it did not run.
func (q *Queue) runInline(ds []*Delivery) []*Delivery {
	if q.inline == nil || len(ds) > inlineMax {
		return ds
	}
	q.mu.Lock()
	idle := q.len() == 0 && q.waiting == q.workers && !q.closed
	q.mu.Unlock()
	if !idle {
		return ds
	}
	return ds[q.inline(ds):]
}

// push is Push under the lock; woke reports whether it woke a waiting worker.
func (q *Queue) push(ctx context.Context, ds []*Delivery) (woke, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.waitRoomLocked(ctx) {
		return false, false
	}
	return q.admitLocked(ds), true
}

// waitRoomLocked waits until at least one place is free; false, once ctx has ended.
func (q *Queue) waitRoomLocked(ctx context.Context) bool {
	if q.used() >= q.limit {
		stop := context.AfterFunc(ctx, func() {
			q.mu.Lock()
			q.room.Broadcast()
			q.mu.Unlock()
		})
		defer stop()
		for q.used() >= q.limit {
			if ctx.Err() != nil {
				return false
			}
			q.room.Wait()
		}
	}
	return ctx.Err() == nil
}

// admitLocked queues ds for the workers (under flow control, deliveries it admitted: they
// stop counting as parked) and wakes as many waiting workers; woke reports whether it woke one.
func (q *Queue) admitLocked(ds []*Delivery) (woke bool) {
	if len(ds) == 0 {
		return false
	}
	if q.flow != nil {
		q.held -= len(ds)
	}
	if q.head > 0 && q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	q.items = append(q.items, ds...)
	if q.flow != nil {
		return q.wakeLocked(flowWakeMax)
	}
	n := min(len(ds), q.waiting)
	for range n {
		q.ready.Signal()
	}
	return n > 0
}

// flowWakeMax is how many waiting workers an admission wakes at once under flow control; each
// worker woken wakes one more while deliveries are left for it (Take).
const flowWakeMax = 2

// wakeLocked wakes up to n waiting workers, no more than the queued deliveries need beyond the
// workers woken already; woke reports whether it woke one. Under flow control a round admits
// a hundred deliveries or so while every worker waits, and a wake per delivery, to a 64th of
// the round each, had each worker woken and parked again on every round: the wakes go on from
// worker to worker instead, as far as deliveries are left, so fast handlers are taken by the
// few workers the CPUs run and slow ones still reach every worker, a wake at a time. Only a
// worker that was woken passes a wake on: one coming back from a handler takes the next
// delivery itself.
func (q *Queue) wakeLocked(n int) (woke bool) {
	n = min(n, q.len()-q.waking, q.waiting-q.waking)
	for range n {
		q.waking++
		q.ready.Signal()
	}
	return n > 0
}

// Take returns the next delivery, waiting for one; false once the queue is closed and empty
// (under flow control: and nothing waits for an admission, or the grace period is over).
func (q *Queue) Take() (*Delivery, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	waited := false
	for {
		for q.len() == 0 {
			if q.closed && q.flow == nil || q.flow != nil && q.flow.workersDoneLocked() {
				return nil, false
			}
			q.waiting++
			q.ready.Wait()
			q.waiting--
			// Woken by a signal or a broadcast: either way this worker has run.
			q.waking = max(q.waking-1, 0)
			waited = true
		}
		d := q.items[q.head]
		q.items[q.head] = nil
		q.head++
		if q.head == len(q.items) {
			q.items, q.head = q.items[:0], 0
		}
		if q.flow != nil {
			if q.flow.lateLocked(d) {
				continue
			}
			if waited {
				q.wakeLocked(1) // the next worker, while deliveries are left for it
			}
		}
		// Wake a waiting source only where its wait can end: Push waits for one free place,
		// RoomFor for what it asked.
		if free := q.limit - q.used(); free == 1 || free == q.want {
			q.room.Broadcast()
		}
		return d, true
	}
}

// Unhold lets go of n parked deliveries that were decided without being admitted.
func (q *Queue) Unhold(n int) {
	if n <= 0 {
		return
	}
	q.mu.Lock()
	q.unholdLocked(n)
	q.mu.Unlock()
}

func (q *Queue) unholdLocked(n int) {
	if n <= 0 {
		return
	}
	q.held = max(q.held-n, 0)
	q.room.Broadcast()
}

// Close ends the feed: workers take what is left, then stop.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.ready.Broadcast()
	q.room.Broadcast()
	if q.flow != nil {
		q.flow.kickLocked()
	}
}

var _ Feed = (*Queue)(nil)
