package engine

import (
	"context"
	"sync"
)

// intake is where a pipeline's decisions go from its handlers: straight to the settler
// (plainIntake), or through flow control, which releases the delivery's lease first
// (flowGate). Either way the workers take from the one Queue.
type intake interface {
	// done hands on a delivery's decision (copied: the caller reuses dec).
	done(d *Delivery, dec *Decision)
	// doneAll hands on the decisions of a push's first deliveries, decs[i] of ds[i].
	doneAll(ds []*Delivery, decs []Decision)
	// returned notes a delivery handed back to its source at a stop, never run.
	returned(d *Delivery)
	// finish is called once every worker has returned; it returns once every decision is
	// handed on.
	finish()
}

// plainIntake hands decisions to the settler.
type plainIntake struct{ h *handoff }

func (p plainIntake) done(_ *Delivery, dec *Decision)        { p.h.put(dec) }
func (p plainIntake) doneAll(_ []*Delivery, decs []Decision) { p.h.putAll(decs) }
func (plainIntake) returned(*Delivery)                       {}
func (plainIntake) finish()                                  {}

var (
	_ intake = plainIntake{}
	_ intake = (*flowGate)(nil)
)

// workers run a pipeline's handlers: Concurrency goroutines that take from the queue and, with
// an Inliner handler, the source's goroutine while they all wait (Queue.SetInline).
type workers struct {
	r        *runner
	q        *Queue
	in       intake
	gate     *holdGate
	returner Returner
	stop     context.Context // the stop signal: what is not started by then goes back
	grace    context.Context // the handlers' context: it ends shutdown_timeout after a stop
	decs     []Decision      // inline's, reused: only the source's goroutine runs it
}

// decide runs the handler of one delivery.
func (w *workers) decide(d *Delivery) Decision {
	w.r.tally.read.Add(1)
	dec := w.r.handle(w.grace, d)
	if dec.Hold != nil {
		w.gate.add(1)
	}
	return dec
}

// inline is the Queue's inline func. The push's decisions are handed on once all of them are
// made, so that the settler wakes once and settles them in one round trip (one XACK, one write
// of their records) rather than the first alone and the rest in a round trip of their own.
func (w *workers) inline(ds []*Delivery) int {
	w.decs = w.decs[:0]
	for _, d := range ds {
		if w.gate.full() != nil || w.stop.Err() != nil {
			break // a worker waits for room, or hands it back
		}
		w.decs = append(w.decs, w.decide(d))
	}
	w.in.doneAll(ds, w.decs)
	clear(w.decs) // the slice outlives the push: keep no message alive
	return len(w.decs)
}

// run runs n workers until the queue has nothing more for them, then finishes the intake.
func (w *workers) run(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.work()
		}()
	}
	wg.Wait()
	w.in.finish()
}

func (w *workers) work() {
	// One decision per worker, reused: handed to the intake by pointer (it copies), so a
	// message's decision is not copied on its way, nor moved to the heap by the interface call.
	dec := new(Decision)
	for {
		// At max_held, take nothing new until copies come due (reading pauses); a stop ends the
		// wait, since held copies are all written then.
		if full := w.gate.full(); full != nil {
			select {
			case <-full:
			case <-w.stop.Done():
			}
		}
		d, ok := w.q.Take()
		if !ok {
			return
		}
		if w.stop.Err() != nil && w.returner != nil {
			// Handed over but not started when the stop came: the source takes it back
			// (pending, or back in its list) rather than have it run now.
			w.returner.Return([]*Delivery{d})
			w.in.returned(d)
			continue
		}
		*dec = w.decide(d)
		w.in.done(d, dec)
		*dec = Decision{} // keep no message alive while this worker waits
	}
}
