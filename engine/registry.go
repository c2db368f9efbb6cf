package engine

import "sort"

// The registry of pipelines (Engine.pipes, under Engine.mu) is the one record of what runs:
// Start, Stop, Run, Pipelines, Status and Totals all read it.

// register makes r the runner of its pipeline's entry in the registry, for Status and Totals.
func (e *Engine) register(r *runner) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.pipes {
		if x.p == r.p && !x.drained {
			x.r = r
		}
	}
}

// runners returns the runner of every pipeline in the registry that has one.
func (e *Engine) runners() []*runner {
	e.mu.Lock()
	defer e.mu.Unlock()
	rs := make([]*runner, 0, len(e.pipes))
	for _, x := range e.pipes {
		if x.r != nil {
			rs = append(rs, x.r)
		}
	}
	return rs
}

// end records that x's runPipeline returned with err, and wakes Run.
func (e *Engine) end(x *running, err error) {
	e.mu.Lock()
	x.err, x.drained = err, true
	if x.r != nil {
		// Its counters are final: the metrics read them from retired from now on.
		o := x.r.tally.snapshot()
		if t := e.retired[x.p.Name]; t != nil {
			o.add(t)
		}
		e.retired[x.p.Name] = &o
	}
	// Status shows the set that runs: a pipeline Stop stopped (a reload removed it, or
	// starts it anew) leaves it; one that ended on its own stays, stopped.
	e.forget(func(o *running) bool { return o == x && (x.stopped || x.r == nil) })
	if !x.stopped {
		e.ended = true
		if err != nil {
			e.errs = append(e.errs, err)
			e.fail()
		}
	}
	e.mu.Unlock()
	close(x.done)
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// live returns the pipeline of the name that has not drained (any such pipeline for ""), or
// nil. e.mu is held.
func (e *Engine) live(name string) *running {
	for _, x := range e.pipes {
		if !x.drained && (name == "" || x.p.Name == name) {
			return x
		}
	}
	return nil
}

// forget removes from the registry the pipelines drop returns true for. e.mu is held.
func (e *Engine) forget(drop func(*running) bool) {
	kept := e.pipes[:0]
	for _, x := range e.pipes {
		if !drop(x) {
			kept = append(kept, x)
		}
	}
	clear(e.pipes[len(kept):]) // keep no stopped runner alive
	e.pipes = kept
}

// PipelineTotals are the outcome totals of the pipelines of one name.
type PipelineTotals struct {
	Name     string
	Outcomes Outcomes
}

// Totals reports, in name order, the outcome totals of every pipeline name this engine has run
// since it was made: those of a pipeline stopped or started anew (a reload) are kept, as a
// Prometheus counter keeps them. They are the counters Status and the progress lines read.
func (e *Engine) Totals() []PipelineTotals {
	e.mu.Lock()
	byName := make(map[string]Outcomes, len(e.retired)+len(e.pipes))
	for name, o := range e.retired {
		byName[name] = *o
	}
	for _, x := range e.pipes {
		if x.r != nil && !x.drained { // a drained one's counters are in retired
			o, live := byName[x.p.Name], x.r.tally.snapshot()
			o.add(&live)
			byName[x.p.Name] = o
		}
	}
	e.mu.Unlock()
	out := make([]PipelineTotals, 0, len(byName))
	for name, o := range byName {
		out = append(out, PipelineTotals{Name: name, Outcomes: o})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
