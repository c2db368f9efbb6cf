package engine

import (
	"fmt"
	"time"
)

// emitTarget is one target's messages of a settle batch, in order: deliveries in batch order,
// each delivery's emits in the order its handler gave them.
type emitTarget struct {
	target Target
	msgs   []*Message
	owner  []int // index into the batch of the decision each message belongs to
}

// emit writes the emits of a batch of decisions before any of them is settled (SPEC §7): one
// Publish per target for the whole batch, targets in the order they first appear. A delivery
// whose emit fails becomes a retry and nothing else; its emits to later targets are not written.
// Then every decision that carried emits is logged and counted with its final outcome.
func (s *settler) emit(decs []Decision) {
	var targets []*emitTarget
	any := false
	for i := range decs {
		for _, em := range decs[i].Emits {
			any = true
			var t *emitTarget
			for _, x := range targets {
				if x.target == em.Target {
					t = x
					break
				}
			}
			if t == nil {
				t = &emitTarget{target: em.Target}
				targets = append(targets, t)
			}
			t.msgs = append(t.msgs, em.Message)
			t.owner = append(t.owner, i)
		}
	}
	if !any {
		return
	}
	failed := map[int]error{}
	cause := map[int]Fault{} // the first fault of each failed delivery, for the log and the count
	for _, t := range targets {
		msgs, owner := t.msgs, t.owner
		if len(failed) > 0 {
			msgs, owner = nil, nil
			for j, m := range t.msgs {
				if _, bad := failed[t.owner[j]]; !bad {
					msgs, owner = append(msgs, m), append(owner, t.owner[j])
				}
			}
		}
		if len(msgs) == 0 {
			continue
		}
		ends := s.emitSpans(decs, t.target, msgs, owner)
		sink, err := s.r.e.sink(t.target)
		if err == nil {
			err = sink.Publish(s.grace, msgs...)
		} else {
			err = fmt.Errorf("emit %s: %w", t.target.Kind, err)
		}
		faults := faultsOf(err, len(msgs))
		endSpans(ends, faults)
		for _, f := range faults {
			if _, ok := failed[owner[f.Index]]; !ok {
				failed[owner[f.Index]] = fmt.Errorf("emit %s %s: %w", t.target.Kind, msgs[f.Index].Key, f)
				if f.Command == "" {
					f.Command = "emit " + t.target.Kind
				}
				if f.Key == "" {
					f.Key = msgs[f.Index].Key
				}
				cause[owner[f.Index]] = f
			}
		}
	}
	now := time.Now()
	for i := range decs {
		d := &decs[i]
		if d.Emits == nil {
			continue
		}
		del := d.Settlement.Delivery
		err, bad := failed[i]
		if bad {
			hadHold := d.Hold != nil
			span := d.Span
			*d = s.r.policy.Decide(del, Retry(), err, now)
			d.Cause, d.Span = err, span
			if hadHold && d.Hold == nil {
				s.gate.add(-1)
			} else if !hadHold && d.Hold != nil {
				s.gate.add(1)
			}
		}
		d.Emits = nil
		if bad {
			s.refusedWrite(d, cause[i])
		}
		s.r.logDecisionAt(del, d, d.Cause, bad)
	}
}

// refusedWrite counts a delivery whose emit Redis refused (an OOM, a NOPERM) and logs it as a
// settlement failure is logged: the first of each command, key and reason per interval, with
// Redis's own text and how many like it were not logged since (SPEC §10).
func (s *settler) refusedWrite(d *Decision, f Fault) {
	s.r.metrics.SettleFailure(f.Reason)
	logIt, suppressed := s.refused.Note(faultKey{f.Command, f.Key, f.Reason}, time.Now())
	if !logIt {
		return
	}
	ev := s.r.log.Warn()
	if f.Permanent {
		ev = s.r.log.Error()
	}
	ev = ev.Err(f.Err).Str("command", f.Command).Str(FieldKey, f.Key).Str("reason", f.Reason).Int("suppressed", suppressed)
	withDelivery(ev, d.Settlement.Delivery).Str("action", d.Settlement.Action.String()).Msg("emit refused: the delivery is retried; like refusals are logged once per interval and counted in flowrun_settle_failures_total")
}

// refusedInterval is how often a refused write of one command, key and reason is logged: the
// progress interval, or 30s when progress lines are off.
func refusedInterval(progress time.Duration) time.Duration {
	if progress <= 0 {
		return 30 * time.Second
	}
	return progress
}

// emitSpans begins a producer span per message whose delivery is traced (each message then
// carries its span's traceparent) and returns their ends, by message; nil when none is traced.
func (s *settler) emitSpans(decs []Decision, t Target, msgs []*Message, owner []int) []func(error) {
	var ends []func(error)
	for j, m := range msgs {
		if sp := decs[owner[j]].Span; sp != nil {
			if ends == nil {
				ends = make([]func(error), len(msgs))
			}
			ends[j] = sp.Emit(t, m)
		}
	}
	return ends
}

// endSpans ends the spans begun for a write (nil: none traced), each with its own fault, if any.
func endSpans(ends []func(error), faults []Fault) {
	if ends == nil {
		return
	}
	errs := make([]error, len(ends))
	for _, f := range faults {
		errs[f.Index] = f
	}
	for i, end := range ends {
		if end != nil {
			end(errs[i])
		}
	}
}
