package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// tally counts what a pipeline did. Its outcome counters are the one record of them: the
// progress lines and end-of-input summary (SPEC §10 "Progress"), Status and the metrics
// (Totals) all read them, each view from one snapshot.
type tally struct {
	start    time.Time
	read     atomic.Int64 // deliveries taken by a worker
	outcomes [numOutcomes]atomic.Int64
	copies   atomic.Int64 // retry, durable and runtime delayed copies written
	dead     atomic.Int64 // dead letters written
	inflight atomic.Int64 // handlers running
}

// Outcomes are a pipeline's totals per outcome, indexed by Label.
type Outcomes [numOutcomes]int64

// Handled is the number of deliveries settled: the sum of the outcomes.
func (o *Outcomes) Handled() int64 {
	var n int64
	for _, c := range o {
		n += c
	}
	return n
}

func (o *Outcomes) add(p *Outcomes) {
	for i := range o {
		o[i] += p[i]
	}
}

func (t *tally) outcome(l Label) {
	if int(l) < len(t.outcomes) {
		t.outcomes[l].Add(1)
	}
}

// snapshot reads every outcome counter once.
func (t *tally) snapshot() Outcomes {
	var o Outcomes
	for i := range t.outcomes {
		o[i] = t.outcomes[i].Load()
	}
	return o
}

// outcomeFields adds the totals per outcome (those not zero) to ev.
func outcomeFields(ev *zerolog.Event, o *Outcomes) *zerolog.Event {
	d := zerolog.Dict()
	for i, n := range o {
		if n > 0 {
			d = d.Int64(Label(i).String(), n)
		}
	}
	return ev.Dict("outcomes", d)
}

// progress logs one line every interval while the pipeline handles anything: the totals per
// outcome since start and the rate over the interval. An idle interval logs nothing.
func (r *runner) progress(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last int64
	lastAt := r.tally.start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			o := r.tally.snapshot()
			n := o.Handled()
			if n == last {
				lastAt = now
				continue
			}
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			outcomeFields(r.log.Info(), &o).Int64("handled", n).Float64("rate", round1(rate)).Msg("progress")
			last, lastAt = n, now
		}
	}
}

// summary is the line a finite source (a file replay, a pipe) ends with.
func (r *runner) summary() {
	o := r.tally.snapshot()
	ev := r.log.Info().Int64("read", r.tally.read.Load()).Int64("handled", o.Handled())
	ev = outcomeFields(ev, &o)
	if m, ok := r.p.Source.(interface{ Malformed() int64 }); ok {
		ev = ev.Int64("malformed", m.Malformed())
	}
	elapsed := time.Since(r.tally.start)
	ev.Int64("copies", r.tally.copies.Load()).Int64("dead_letters", r.tally.dead.Load()).
		Dur("elapsed_ms", elapsed).Float64("rate", round1(float64(o.Handled())/elapsed.Seconds())).
		Msg("input done")
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
