package redisrun

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/workflow"
)

// settleOp is one settlement as the batch's pipeline sends it.
type settleOp struct {
	idx  int
	id   string
	key  string // named by a fault
	cmd  *redis.Cmd
	keys []string
	args []any
	copy bool          // copyScript; else applyScript
	own  *redis.Script // a script of its own (a fan-out's, a park), whose reply says nothing to read
	t    workflow.Transition
	// prev is the run t was decided on (nil for a script of its own, unused for a copy): with t
	// applied, what this process knows of the run next (knownRuns).
	prev *workflow.State
	// trace is the run's trace context (read with the run): its span when t ends it.
	trace string
}

// Settle carries out a batch in one round trip (SPEC §16 "Moving on"), on the shared client:
//
//   - a stale visit (any action): XACK only;
//   - ActAck: Graph.Finish (the step handler's ack or drop), applied with the acknowledgement
//     in one script (output, history, the next step's message or the run's end, XACK);
//   - ActDeadLetter: Graph.Fail, applied with the dead letter (x-run-id added) in the script;
//   - ActRequeue: a copy to the step's stream, ActDelay: a copy to the delayed set, each
//     written and the original acknowledged in one script, only while it is still pending, with
//     the retry in the run's history while the visit is the run's.
//
// A resent batch is harmless: an applied transition's visit is gone (the script acknowledges
// and changes nothing), a settled copy's original is no longer pending.
func (src *stepSource) Settle(ctx context.Context, batch []engine.Settlement) error {
	if len(batch) == 0 {
		return nil
	}
	var se engine.SettleError
	fail := func(i int, cmd, key string, err error) {
		se.Add(redisconn.Fault(i, cmd, key, err, src.secrets...))
	}
	now := time.Now()
	var acks []string
	var ackIdx []int
	var ops []*settleOp
	for i := range batch {
		st := &batch[i]
		v := visitOf(st.Delivery)
		switch {
		case st.Delivery == nil:
			fail(i, "settle", src.stream, fmt.Errorf("settlement without a delivery: %w", engine.ErrPermanent))
		case v == nil || v.Stale || v.State == nil:
			acks, ackIdx = append(acks, st.Delivery.ID), append(ackIdx, i)
		default:
			op, err := src.plan(ctx, i, st, v, now)
			if err != nil {
				fail(i, "settle", src.stream, err)
				continue
			}
			ops = append(ops, op)
		}
	}
	pipe := src.s.c.Pipeline()
	var ack *redis.IntCmd
	if len(acks) > 0 {
		ack = pipe.XAck(ctx, src.stream, src.s.g.Name, acks...)
	}
	for _, op := range ops {
		op.cmd = op.script().EvalSha(ctx, pipe, op.keys, op.args...)
	}
	perr := redisconn.ExecPipe(ctx, pipe)
	var done []string
	if ack != nil {
		if err := redisconn.FirstErr(ack.Err(), perr); err != nil {
			for _, i := range ackIdx {
				fail(i, "xack", src.stream, err)
			}
		} else {
			done = append(done, acks...)
		}
	}
	for _, op := range ops {
		if src.result(ctx, op, perr, fail) {
			done = append(done, op.id)
		}
	}
	src.untrack(done)
	return se.Err()
}

func (op *settleOp) script() *redis.Script {
	if op.own != nil {
		return op.own
	}
	if op.copy {
		return copyScript
	}
	return applyScript
}

// result reads one op's reply (sent again with EVAL when Redis had lost the script) and says
// whether the delivery is settled.
func (src *stepSource) result(ctx context.Context, op *settleOp, perr error, fail func(int, string, string, error)) bool {
	v, err := src.s.reply(ctx, op.script(), op.cmd, op.keys, op.args, perr)
	if err != nil {
		fail(op.idx, "evalsha", op.key, err)
		return false
	}
	if op.copy || op.own != nil {
		return true
	}
	applied, started, err := result(v)
	if err != nil {
		fail(op.idx, "evalsha", op.key, err)
		return false
	}
	if applied {
		src.s.done(op.t, started, op.trace)
		if op.prev != nil {
			src.s.known.put(after(op.prev, op.t))
		}
	}
	return true
}

func visitOf(d *engine.Delivery) *workflow.Visit {
	if d == nil || d.Run == nil {
		return nil
	}
	v, _ := d.Run.State.(*workflow.Visit)
	return v
}

// plan is the script settlement i sends.
func (src *stepSource) plan(ctx context.Context, i int, st *engine.Settlement, v *workflow.Visit, now time.Time) (*settleOp, error) {
	d := st.Delivery
	g := src.s.g
	if v.Park && st.Action == engine.ActAck {
		return src.planPark(i, d, v), nil
	}
	if op, handled, err := src.planFan(ctx, i, st, v, now); handled {
		return op, err
	}
	op := &settleOp{idx: i, id: d.ID, key: src.s.k.run(d.Run.ID), prev: v.State, trace: v.State.TraceParent}
	switch st.Action {
	case engine.ActAck:
		label := v.Label
		if label == "" {
			// Acknowledged without the step handler's ack or drop: a dedupe key that had
			// succeeded (SPEC §13), the visit's work done before. (The policy's other ActAck,
			// a rejection, needs a pipeline without a dead letter; a step always has one.)
			label = engine.OutcomeAck.String()
		}
		t := g.Finish(v.State, d.Run, d.Attempt, label, now)
		op.t = t
		op.keys, op.args = src.s.call(applyOp{t: t, prev: v.State, ackStream: src.stream, ackID: d.ID})
	case engine.ActDeadLetter:
		if st.Copy == nil || st.DeadLetterKey == "" {
			return nil, fmt.Errorf("dead letter %s: no copy or key: %w", d.ID, engine.ErrPermanent)
		}
		t := g.Fail(v.State, d.Attempt, st.Copy.Headers[engine.HeaderDeadLetterReason], now)
		c := st.Copy.Clone()
		c.Headers[engine.HeaderRunID] = d.Run.ID
		ao := applyOp{t: t, prev: v.State, ackStream: src.stream, ackID: d.ID, dead: codec.StreamFields(c), deadKey: st.DeadLetterKey}
		if !redisconn.SameSlot(src.s.c, st.DeadLetterKey, src.stream) {
			// Another slot (a Cluster, a dead_letter without the workflow's hash tag): written
			// first, on its own; a crash before the script leaves a duplicate, never a loss.
			if err := src.s.c.XAdd(ctx, &redis.XAddArgs{Stream: st.DeadLetterKey, Values: ao.dead}).Err(); err != nil {
				return nil, fmt.Errorf("xadd %s: %w", st.DeadLetterKey, err)
			}
			ao.dead = nil
		}
		op.t = t
		op.keys, op.args = src.s.call(ao)
	case engine.ActRequeue, engine.ActDelay:
		if st.Copy == nil {
			return nil, fmt.Errorf("%s %s: no copy: %w", st.Action, d.ID, engine.ErrPermanent)
		}
		f := copyFields(st.Copy, d.Run)
		ev := workflow.Event{Step: src.step, Visit: d.Run.Visit, Attempt: d.Attempt, Outcome: engine.OutcomeRetry.String(), At: now}
		if st.Action == engine.ActDelay {
			ev.Outcome = engine.OutcomeRetryAfter.String()
		}
		op.copy, op.key = true, src.stream
		op.keys = []string{src.stream, src.s.k.delayed(), src.s.k.run(d.Run.ID), src.s.k.hist(d.Run.ID)}
		op.args = []any{g.Name, d.ID, itoa(d.Run.Visit), eventJSON(ev)}
		if st.Action == engine.ActDelay {
			op.args = append(op.args, "z", msOf(st.Due), delayedMember(src.step, f))
		} else {
			op.args = append(op.args, "x")
			for _, s := range f {
				op.args = append(op.args, s)
			}
		}
	default:
		return nil, fmt.Errorf("settle %s: %s: %w", d.ID, st.Action, engine.ErrUnsupported)
	}
	return op, nil
}

// copyFields are a retry copy's step message: the run, the visit, x-retry-count and the
// headers the entry came with; not the payload, nor the headers the step handler adds (it
// computes them again for the copy's delivery).
func copyFields(c *engine.Message, run *engine.Run) []string {
	m := &engine.Message{Headers: make(map[string]string, len(c.Headers))}
	for k, v := range c.Headers {
		if k != engine.HeaderIdempotencyKey && k != engine.HeaderRunID && !strings.HasPrefix(k, "x-dead-letter") {
			m.Headers[k] = v
		}
	}
	m.Headers[msgRun] = run.ID
	m.Headers[msgVisit] = itoa(run.Visit)
	return codec.StreamFields(m)
}

// Requeue writes runtime copies (held retry_after copies) back onto the step's stream.
func (src *stepSource) Requeue(ctx context.Context, msgs []*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pipe := src.s.c.Pipeline()
	for _, m := range msgs {
		f := codec.StreamFields(&engine.Message{Headers: withoutStepHeaders(m.Headers)})
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: src.stream, Values: f})
	}
	cmds, _ := pipe.Exec(ctx)
	var se engine.SettleError
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			se.Add(redisconn.Fault(i, "xadd", src.stream, err, src.secrets...))
		}
	}
	return se.Err()
}

func withoutStepHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if k != engine.HeaderIdempotencyKey && k != engine.HeaderRunID {
			out[k] = v
		}
	}
	return out
}
