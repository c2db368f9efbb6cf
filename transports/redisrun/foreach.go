package redisrun

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// A for_each step's visit in Redis (SPEC §16 "Fan-out"; the messages are workflow/foreach.go's):
//
//	flowrun:{WF}:fe:RUN:VISIT  hash: "n" the elements expected, "c" the outputs recorded, and
//	                           each element's output (JSON) by its index ("0", "1", ...)
//	flowrun:{WF}:fans          set: "RUN\nVISIT" of every join hash, for hygiene to delete
//	                           those whose visit is over
//
// Exactly once under kill -9: the fan script writes the element messages and the join hash only
// while the visit is the run's and the hash does not exist (a fan message delivered twice fans
// out once); an element's ack records its output with HSETNX and counts it only when it was new
// (a duplicate ack changes nothing), and the count reaching n writes the one join message, in
// the same script; the join is applied by applyScript with the visit check, so however often it
// is delivered the step finishes once.

func (k keys) fanJoin(run string, visit int) string {
	return k.prefix + "fe:" + run + ":" + itoa(visit)
}
func (k keys) fans() string { return k.prefix + "fans" }

// fanScript writes a fan-out. KEYS: the run, its join hash, the step stream, the fans set. ARGV:
// group, the fan delivery's id, the visit, the fans member, the traceparent ("" none), the run
// id, n, then the n elements (JSON). Stale (the visit is not the run's, the run ended, or the
// fan-out exists): only XACK, 0. Else 1.
var fanScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'visit', 'status')
local active = r[2] == 'running' or r[2] == 'waiting' or r[2] == 'compensating'
if r[1] ~= ARGV[3] or not active or redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
  return 0
end
local n = tonumber(ARGV[7])
redis.call('HSET', KEYS[2], 'n', n, 'c', 0)
redis.call('SADD', KEYS[4], ARGV[4])
for i = 1, n do
  if ARGV[5] ~= '' then
    redis.call('XADD', KEYS[3], '*', 'run', ARGV[6], 'visit', ARGV[3], 'index', i - 1, 'item', ARGV[7 + i], 'traceparent', ARGV[5])
  else
    redis.call('XADD', KEYS[3], '*', 'run', ARGV[6], 'visit', ARGV[3], 'index', i - 1, 'item', ARGV[7 + i])
  end
end
redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
return 1
`)

// itemScript records an element's output. KEYS: the run, its join hash, the step stream. ARGV:
// group, the element delivery's id, the visit, the index, the output (JSON), the run id, the
// traceparent ("" none). Stale (the visit is over, the fan-out gone): only XACK, 0. An output
// recorded before (a duplicate): XACK, 0. Else 1, and the last output writes the join message.
var itemScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'visit', 'status')
local active = r[2] == 'running' or r[2] == 'waiting' or r[2] == 'compensating'
local n = redis.call('HGET', KEYS[2], 'n')
local applied = 0
if r[1] == ARGV[3] and active and n and redis.call('HSETNX', KEYS[2], ARGV[4], ARGV[5]) == 1 then
  applied = 1
  if redis.call('HINCRBY', KEYS[2], 'c', 1) == tonumber(n) then
    if ARGV[7] ~= '' then
      redis.call('XADD', KEYS[3], '*', 'run', ARGV[6], 'visit', ARGV[3], 'join', '1', 'traceparent', ARGV[7])
    else
      redis.call('XADD', KEYS[3], '*', 'run', ARGV[6], 'visit', ARGV[3], 'join', '1')
    end
  end
end
redis.call('XACK', KEYS[3], ARGV[1], ARGV[2])
return applied
`)

// planFan is the settlement of an ack on a for_each step (handled true); any other action, and
// an empty list's ack (an ordinary finish with []), settle as on any step (handled false).
func (src *stepSource) planFan(ctx context.Context, i int, st *engine.Settlement, v *workflow.Visit, now time.Time) (op *settleOp, handled bool, err error) {
	if st.Action != engine.ActAck {
		return nil, false, nil
	}
	if def := src.s.g.Step(src.step); def == nil || !def.ForEach {
		return nil, false, nil
	}
	d := st.Delivery
	fan := v.Fan
	if fan == nil {
		// Acknowledged without the handler (a dedupe key that had succeeded): the message's
		// own fields say which it is.
		kind, index, _, ferr := workflow.FanOf(d.Headers)
		if ferr != nil {
			return nil, true, fmt.Errorf("%s: %w: %w", d.ID, ferr, engine.ErrPermanent)
		}
		fan = &workflow.Fan{Kind: kind, Index: index}
	}
	op = &settleOp{idx: i, id: d.ID, key: src.s.k.run(d.Run.ID), trace: v.State.TraceParent}
	tp := engine.RunTraceparent(v.State.TraceParent) // the run span's, on each message written
	switch fan.Kind {
	case workflow.FanOut:
		if len(fan.Items) == 0 {
			if v.Fan != nil {
				return nil, false, nil // the empty list: the step finishes with []
			}
			return nil, true, fmt.Errorf("fan-out %s acknowledged without its for_each list: %w", d.ID, engine.ErrPermanent)
		}
		op.own = fanScript
		op.keys = []string{src.s.k.run(d.Run.ID), src.s.k.fanJoin(d.Run.ID, d.Run.Visit), src.stream, src.s.k.fans()}
		op.args = make([]any, 0, 7+len(fan.Items))
		op.args = append(op.args, src.s.g.Name, d.ID, itoa(d.Run.Visit), timerMember(d.Run.ID, d.Run.Visit),
			tp, d.Run.ID, len(fan.Items))
		for _, it := range fan.Items {
			op.args = append(op.args, string(it))
		}
	case workflow.FanItem:
		out, oerr := workflow.ElementOutput(d.Run)
		if oerr != nil {
			// As a step's output that does not encode: the run fails (Graph.Finish's way).
			t := src.s.g.Fail(v.State, d.Attempt, fmt.Sprintf("element %d: %v", fan.Index, oerr), now)
			op.t = t
			op.keys, op.args = src.s.call(applyOp{t: t, prev: v.State, ackStream: src.stream, ackID: d.ID})
			return op, true, nil
		}
		op.own = itemScript
		op.keys = []string{src.s.k.run(d.Run.ID), src.s.k.fanJoin(d.Run.ID, d.Run.Visit), src.stream}
		op.args = []any{src.s.g.Name, d.ID, itoa(d.Run.Visit), itoa(fan.Index), string(out), d.Run.ID, tp}
	case workflow.FanJoin:
		t, jerr := src.join(ctx, v.State, d, now)
		if jerr != nil {
			return nil, true, jerr
		}
		op.t = t
		op.keys, op.args = src.s.call(applyOp{t: t, prev: v.State, ackStream: src.stream, ackID: d.ID})
	}
	return op, true, nil
}

// join is the transition a join delivery applies: the step's finish with the outputs in
// element order, read from the join hash. A hash that is gone (its visit over: hygiene deleted
// it) makes a transition of no visit, which the script finds stale.
func (src *stepSource) join(ctx context.Context, st *workflow.State, d *engine.Delivery, now time.Time) (workflow.Transition, error) {
	h, err := src.s.c.HGetAll(ctx, src.s.k.fanJoin(d.Run.ID, d.Run.Visit)).Result()
	if err != nil {
		return workflow.Transition{}, fmt.Errorf("read the join of run %s: %w", d.Run.ID, err)
	}
	n, err := atoi(h["n"])
	if len(h) == 0 || err != nil {
		return workflow.Transition{Run: d.Run.ID, Visit: workflow.NoVisit, Status: st.Status, At: now}, nil
	}
	outputs := make([]json.RawMessage, n)
	for i := range outputs {
		o, ok := h[itoa(i)]
		if !ok {
			return workflow.Transition{}, fmt.Errorf("join of run %s: no output of element %d of %d: %w", d.Run.ID, i, n, engine.ErrPermanent)
		}
		outputs[i] = json.RawMessage(o)
	}
	return src.s.g.Join(st, outputs, d.Attempt, now), nil
}

// pruneFans deletes the join hashes whose visit is over (the step finished, the run failed,
// timed out or was cancelled): nothing reads them any more, since every script that would
// checks the visit first, and a visit never comes back.
func (s *Store) pruneFans(ctx context.Context) error {
	var cursor uint64
	for {
		members, next, err := s.c.SScan(ctx, s.k.fans(), cursor, "", listPage).Result()
		if err != nil {
			return fmt.Errorf("redisrun: read fan-outs of %s: %w", s.g.Name, err)
		}
		if err := s.pruneFanPage(ctx, members); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

func (s *Store) pruneFanPage(ctx context.Context, members []string) error {
	if len(members) == 0 {
		return nil
	}
	pipe := s.c.Pipeline()
	runs := make([]*redis.SliceCmd, len(members))
	for i, m := range members {
		run, _, _ := parseTimerMember(m)
		runs[i] = pipe.HMGet(ctx, s.k.run(run), fVisit, fStatus)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisrun: read fan-out runs of %s: %w", s.g.Name, err)
	}
	pipe = s.c.Pipeline()
	var over []any
	for i, m := range members {
		run, visit, ok := parseTimerMember(m)
		vals := runs[i].Val()
		cur, _ := vals[0].(string)
		status, _ := vals[1].(string)
		if ok && cur == itoa(visit) && workflow.Status(status).Active() {
			continue
		}
		over = append(over, m)
		if ok {
			pipe.Del(ctx, s.k.fanJoin(run, visit))
		}
	}
	if len(over) == 0 {
		return nil
	}
	pipe.SRem(ctx, s.k.fans(), over...)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisrun: delete finished fan-outs of %s: %w", s.g.Name, err)
	}
	return nil
}
