package redisrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// Wait steps in Redis (SPEC §16 "Waiting"). Two sides meet in the workflow's slot:
//
//   - the step side: the wait step's own stream, read as every step's is, its delivery handled by
//     WaitHandler: parkScript parks the run (status waiting) unless an event is kept for it,
//     which it hands on instead as a new step message carrying the event;
//   - the event side: the wait's source, its deliveries handled by EventHandler: an event for a
//     run waiting at the step finishes the step through applyScript (the output is the event's
//     payload); otherwise keepScript keeps the event for the run.
//
// parkScript refuses to park while an event is kept, and keepScript refuses to keep while the
// run is waiting at the step: both run in the same slot, so one of them always sees the other,
// and no event is lost between them. A kept event lives in the hash flowrun:{WF}:kept (field
// "STEP\nRUN", the payload) and its expiry in the sorted set flowrun:{WF}:kept_due; the timers
// drop the expired ones, counted rejected.

// hdrEvent marks a step message that carries the kept event it finishes the visit with.
const hdrEvent = "event"

func (k keys) kept() string    { return k.prefix + "kept" }
func (k keys) keptDue() string { return k.prefix + "kept_due" }

// KeptKey is the hash of a workflow's kept events (field "STEP\nRUN"); KeptDueKey their expiry.
func KeptKey(workflow string) string    { return newKeys(workflow).kept() }
func KeptDueKey(workflow string) string { return newKeys(workflow).keptDue() }

func keptField(step, run string) string { return step + "\n" + run }

// parkScript is a wait step's visit. KEYS: run, kept, kept_due, the step's stream. ARGV: group,
// the delivery id, its visit, the step, the kept field, now (ms), then the step message's fields.
// A visit that is not the run's current one at this step, or a run not running: acknowledged,
// {0}. A run already waiting there (a redelivery): {1}. An event kept for the run: a new step
// message of the same visit carrying it (field event "1" and its payload), the kept event
// removed, the delivery acknowledged: {2}. Else the run is parked, status waiting: {1}.
var parkScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'visit', 'step', 'status')
local function ack() if ARGV[2] ~= '' then redis.call('XACK', KEYS[4], ARGV[1], ARGV[2]) end end
if r[1] ~= ARGV[3] or r[2] ~= ARGV[4] then ack(); return 0 end
if r[3] == 'waiting' then ack(); return 1 end
if r[3] ~= 'running' then ack(); return 0 end
local ev = redis.call('HGET', KEYS[2], ARGV[5])
if ev then
  redis.call('XADD', KEYS[4], '*', 'event', '1', 'payload', ev, unpack(ARGV, 7))
  redis.call('HDEL', KEYS[2], ARGV[5])
  redis.call('ZREM', KEYS[3], ARGV[5])
  ack()
  return 2
end
redis.call('HSET', KEYS[1], 'status', 'waiting', 'updated_at', ARGV[6])
ack()
return 1
`)

// keepScript keeps an event for a run that is not waiting at the step. KEYS: run, kept,
// kept_due. ARGV: the step, the kept field, the payload, the expiry (ms). Returns 0 when the
// run is waiting at the step (the caller finishes it instead), 2 when an event is kept for it
// already (this one is rejected), 1 kept.
var keepScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'status', 'step')
if r[1] == 'waiting' and r[2] == ARGV[1] then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3]) == 0 then return 2 end
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2])
return 1
`)

// expireKeptScript drops up to ARGV[2] kept events due at ARGV[1] (ms). KEYS: kept, kept_due.
// Returns their fields.
var expireKeptScript = redis.NewScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, f in ipairs(due) do
  redis.call('HDEL', KEYS[1], f)
  redis.call('ZREM', KEYS[2], f)
end
return due
`)

// WaitHandler is the handler of a wait step's pipeline (its stream read by StepSource). A
// delivery that carries its kept event finishes the step with it (the settlement's ack); any
// other is marked Park: its settlement parks the run or hands its kept event on (parkScript),
// so the handler does no I/O, and a waiting run holds no handler and nothing in this process.
func (s *Store) WaitHandler() engine.Handler {
	return engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
		v, _ := d.Run.State.(*workflow.Visit)
		if v == nil || v.State == nil {
			return engine.Result{Outcome: engine.Retry(), Err: errors.New("wait step: delivery without a run visit")}
		}
		v.Label, v.Park = "", false
		if v.Stale {
			return engine.Result{Outcome: engine.Ack(), Duplicate: true}
		}
		if d.Headers[hdrEvent] == "1" {
			d.Run.Output, d.Run.HasOutput = workflow.PayloadJSON(d.Payload), true
			v.Label = engine.OutcomeAck.String()
			return engine.Result{Outcome: engine.Ack()}
		}
		v.Park = true // the settlement parks the run, with the batch's others
		return engine.Result{Outcome: engine.Ack()}
	})
}

// planPark is the settlement of a wait step's visit that has no event yet: parkScript, sent
// with the batch. It fails as any settlement does (a fault, resent with backoff; the delivery
// stays pending meanwhile), and a resend is harmless: the run waits already, or the visit is
// gone.
func (src *stepSource) planPark(i int, d *engine.Delivery, v *workflow.Visit) *settleOp {
	s, step := src.s, src.step
	fields := stepFields(d.Run.ID, d.Run.Visit, v.State.TraceParent)
	args := make([]any, 0, 6+len(fields))
	args = append(args, s.g.Name, d.ID, itoa(d.Run.Visit), step, keptField(step, d.Run.ID), msOf(time.Now()))
	for _, f := range fields {
		args = append(args, f)
	}
	return &settleOp{idx: i, id: d.ID, key: s.k.run(d.Run.ID), own: parkScript,
		keys: []string{s.k.run(d.Run.ID), s.k.kept(), s.k.keptDue(), src.stream}, args: args}
}

// waitRounds bounds how often an event is matched again when its run moved under it.
const waitRounds = 5

// EventHandler is the handler of a wait's events (the pipeline "<workflow>.<step>" reading the
// wait's source): correlate names the event's run. An event for a run waiting at the step
// finishes it (output: the event's payload); one for a run that has not reached the step (or
// does not exist yet) is kept for it up to keep; one for a run that has ended, a second one
// kept for the same run, or one whose correlate fails or is empty is rejected (a dead letter
// outcome: the pipeline has none, so it is acknowledged and counted rejected).
func (s *Store) EventHandler(step string, keep time.Duration, correlate func(*engine.Delivery) (string, error)) engine.Handler {
	return engine.HandlerFunc(func(ctx context.Context, d *engine.Delivery) engine.Result {
		id, err := correlate(d)
		if err == nil && strings.TrimSpace(id) == "" {
			err = errors.New("it is empty")
		}
		if err != nil {
			return engine.Result{Outcome: engine.DeadLetter(fmt.Sprintf("correlate: %v", err))}
		}
		payload := workflow.PayloadJSON(d.Payload)
		for range waitRounds {
			st, err := s.record(ctx, id)
			if err != nil {
				return engine.Result{Outcome: engine.Retry(), Err: err}
			}
			switch {
			case st != nil && st.Step != step && s.finishedWith(ctx, id, step, payload):
				// The step finished with this very event: a redelivery (the process died after
				// the finish, before the event's acknowledgement).
				return engine.Result{Outcome: engine.Ack(), Duplicate: true}
			case st != nil && !st.Status.Active():
				return engine.Result{Outcome: engine.DeadLetter(fmt.Sprintf("run %s is %s", id, st.Status))}
			case st != nil && st.WaitingAt(step):
				ok, err := s.exec(ctx, applyOp{t: s.g.Arrive(st, payload, d.Attempt, time.Now()), prev: st})
				if err != nil {
					return engine.Result{Outcome: engine.Retry(), Err: err}
				}
				if ok {
					return engine.Result{Outcome: engine.Ack()}
				}
				continue // it moved (a timeout, a cancel): look again
			}
			n, err := s.keep(ctx, step, id, payload, keep)
			switch {
			case err != nil:
				return engine.Result{Outcome: engine.Retry(), Err: err}
			case n == 1:
				return engine.Result{Outcome: engine.Ack()}
			case n == 2:
				return engine.Result{Outcome: engine.DeadLetter(fmt.Sprintf("an event for run %s at step %s is kept already", id, step))}
			}
			// the run is waiting now: finish it
		}
		return engine.Result{Outcome: engine.Retry(), Err: fmt.Errorf("redisrun: run %s keeps moving", id)}
	})
}

// finishedWith reports whether the run's output of step is payload (as the finish recorded it:
// compact JSON). A failed read says no: the event is then kept or rejected as any other.
func (s *Store) finishedWith(ctx context.Context, id, step string, payload []byte) bool {
	out, err := s.c.HGet(ctx, s.k.out(id), step).Result()
	if err != nil {
		return false
	}
	var b bytes.Buffer
	if json.Compact(&b, payload) != nil {
		return false
	}
	return out == b.String()
}

// record reads a run's record without its outputs and history; nil when there is none.
func (s *Store) record(ctx context.Context, id string) (*workflow.State, error) {
	h, err := s.c.HGetAll(ctx, s.k.run(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("redisrun: read run %s: %w", id, err)
	}
	st, err := decodeState(s.g.Name, id, h, nil)
	if err != nil {
		return nil, fmt.Errorf("redisrun: %w", err)
	}
	return st, nil
}

func (s *Store) keep(ctx context.Context, step, id string, payload []byte, keep time.Duration) (int64, error) {
	keys := []string{s.k.run(id), s.k.kept(), s.k.keptDue()}
	n, err := keepScript.Run(ctx, s.c, keys, step, keptField(step, id), string(payload), msOf(time.Now().Add(keep))).Int64()
	if err != nil {
		return 0, fmt.Errorf("redisrun: keep an event for run %s at %s: %w", id, step, err)
	}
	return n, nil
}

// expireKept drops the kept events whose time is up, telling OnRejected of each; it returns how
// many were due.
func (s *Store) expireKept(ctx context.Context, log zerolog.Logger) (int, error) {
	due, err := expireKeptScript.Run(ctx, s.c, []string{s.k.kept(), s.k.keptDue()}, time.Now().UnixMilli(), timerBatch).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("redisrun: expire kept events of %s: %w", s.g.Name, err)
	}
	for _, f := range due {
		step, run, _ := strings.Cut(f, "\n")
		log.Warn().Str("step", step).Str("run", run).Msg("rejected: an event kept for a run that never reached the wait step expired")
		if s.OnRejected != nil {
			s.OnRejected(step)
		}
	}
	return len(due), nil
}

func (s *Store) hasWaits() bool {
	for _, st := range s.g.Steps {
		if st.Wait {
			return true
		}
	}
	return false
}
