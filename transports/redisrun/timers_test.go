package redisrun

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// toCharge moves run id from reserve into charge (visit 2) by hand, with deadline and delay.
func (e *env) toCharge(id string, at time.Time, delay time.Duration, deadline time.Time) {
	e.t.Helper()
	ok, err := e.s.Apply(e.ctx, workflow.Transition{Run: id, Visit: 1, Step: "reserve", Status: workflow.Running,
		Enter: "charge", EnterDelay: delay, EnterDeadline: deadline, Finished: []string{"reserve"}, At: at})
	if err != nil || !ok {
		e.t.Fatalf("to charge: %v %v", ok, err)
	}
}

func (e *env) runTimers() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error)
	go func() { done <- e.s.RunTimers(ctx, zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel)) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("RunTimers: %v", err)
		}
	})
}

func TestTimeoutFiresAndCompensates(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	e.begin("r1", `{}`)
	e.toCharge("r1", now, 0, now.Add(200*time.Millisecond))
	// A timeout of a visit that is over is removed and does nothing.
	e.rdb.ZAdd(e.ctx, e.k.timeouts(), redis.Z{Score: 1, Member: "r1\n1"})
	e.runTimers()
	e.waitFor("the timeout", 3*time.Second, func() bool { return e.hgetall(e.k.run("r1"))["status"] == "compensating" })
	if time.Since(now) < 200*time.Millisecond {
		t.Errorf("fired before its deadline")
	}
	h := e.hgetall(e.k.run("r1"))
	if h["step"] != "release" || h["error"] != "timeout" || h["failed_step"] != "charge" || h["visit"] != "3" {
		t.Errorf("run = %v", h)
	}
	e.waitFor("the timeouts to be gone", 3*time.Second, func() bool { return len(e.zrange(e.k.timeouts())) == 0 })
	st, err := e.s.Get(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if last := st.History[len(st.History)-1]; last.Outcome != workflow.EventTimeout || last.Step != "charge" || last.Visit != 2 {
		t.Errorf("last event = %+v", last)
	}
	if xs := e.xrange(e.k.step("release")); len(xs) != 1 {
		t.Errorf("release messages = %d", len(xs))
	}
	// charge's message is stale now: acknowledged unrun.
	r := e.stepSource("charge", "w1", time.Minute)
	if d := r.Next(t); !d.Run.State.(*workflow.Visit).Stale {
		t.Errorf("charge visit after the timeout is not stale")
	}
}

func TestDelayedStepMovedWhenDue(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	e.begin("r1", `{}`)
	e.toCharge("r1", now, 300*time.Millisecond, time.Time{})
	e.rdb.ZAdd(e.ctx, e.k.delayed(), redis.Z{Score: 1, Member: `{"step":"gone","f":["run","x","visit","1"]}`})
	if xs := e.xrange(e.k.step("charge")); len(xs) != 0 {
		t.Fatalf("written before due: %v", xs)
	}
	e.runTimers()
	e.waitFor("the delayed message", 3*time.Second, func() bool { return len(e.xrange(e.k.step("charge"))) == 1 })
	if time.Since(now) < 300*time.Millisecond {
		t.Errorf("moved before due")
	}
	if f := fields(e.xrange(e.k.step("charge"))[0]); f["run"] != "r1" || f["visit"] != "2" {
		t.Errorf("moved message = %v", f)
	}
	// The member of a step the workflow does not have stays, looked at again later.
	z := e.zrange(e.k.delayed())
	if len(z) != 1 || z[0].Score < float64(now.Add(30*time.Second).UnixMilli()) {
		t.Errorf("delayed = %v", z)
	}
}

func TestStartHandlerCreatesOnceAndDuplicates(t *testing.T) {
	e := newEnv(t)
	h := e.s.StartHandler(nil, "fp")
	d := &engine.Delivery{Message: engine.Message{Key: "orders", ID: "1-0", Headers: map[string]string{}, Payload: []byte("not json")}}
	if res := h.Handle(e.ctx, d); res.Err != nil || res.Duplicate || res.Outcome.Kind != engine.KindAck {
		t.Fatalf("first start = %+v", res)
	}
	if res := h.Handle(e.ctx, d); !res.Duplicate {
		t.Fatalf("second start = %+v", res)
	}
	st, err := e.s.Get(e.ctx, "orders/1-0")
	if err != nil {
		t.Fatal(err)
	}
	if string(st.Input) != `"not json"` || st.Fingerprint != "fp" || st.Step != "reserve" || st.Status != workflow.Running {
		t.Errorf("run = %+v", st)
	}
	if xs := e.xrange(e.k.step("reserve")); len(xs) != 1 {
		t.Errorf("reserve messages = %d", len(xs))
	}

	named := e.s.StartHandler(func(d *engine.Delivery) (string, error) {
		var v struct{ ID string }
		return v.ID, json.Unmarshal(d.Payload, &v)
	}, "fp")
	d = &engine.Delivery{Message: engine.Message{Key: "orders", Headers: map[string]string{}, Payload: []byte(`{"ID":"o7"}`)}}
	if res := named.Handle(e.ctx, d); res.Err != nil || res.Duplicate {
		t.Fatalf("named start = %+v", res)
	}
	if _, err := e.s.Get(e.ctx, "o7"); err != nil {
		t.Errorf("run o7: %v", err)
	}
	d.Payload = []byte(`{}`)
	if res := named.Handle(e.ctx, d); res.Err == nil || res.Outcome.Kind != engine.KindRetry {
		t.Errorf("empty run id = %+v", res)
	}
}

func TestCancelRetryAndRedrive(t *testing.T) {
	e := newEnv(t)
	e.begin("c1", `{}`)
	if err := e.s.Cancel(e.ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if h := e.hgetall(e.k.run("c1")); h["status"] != "cancelled" {
		t.Errorf("cancelled run = %v", h)
	}
	if err := e.s.Cancel(e.ctx, "c1"); !errors.Is(err, ErrNotActive) {
		t.Errorf("cancel twice = %v", err)
	}
	if err := e.s.Cancel(e.ctx, "none"); !errors.Is(err, workflow.ErrNoRun) {
		t.Errorf("cancel of no run = %v", err)
	}
	if err := e.s.Retry(e.ctx, "c1"); !errors.Is(err, workflow.ErrNotRetryable) {
		t.Errorf("retry of a cancelled run = %v", err)
	}

	// r1 fails at reserve (nothing to compensate): failed, retryable, its message a dead letter.
	e.begin("r1", `{}`)
	r := e.stepSource("reserve", "w1", time.Minute)
	d := r.Next(t)
	if d.Run.ID != "c1" || !d.Run.State.(*workflow.Visit).Stale {
		t.Fatalf("cancelled run's message: %+v", d.Run)
	}
	r.decide(t, d, engine.Ack())
	d = r.Next(t)
	r.decide(t, d, handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
		return engine.Result{Outcome: engine.DeadLetter("boom")}
	}).Outcome)
	if h := e.hgetall(e.k.run("r1")); h["status"] != "failed" || h["failed_step"] != "reserve" {
		t.Fatalf("failed run = %v", h)
	}
	if d := e.pttl(e.k.run("r1")); d <= 0 {
		t.Errorf("failed run PTTL = %s", d)
	}
	dls, n, err := e.s.DeadLetters(e.ctx, 0, nil)
	if err != nil || n != 1 || dls[0].Message.Headers[engine.HeaderRunID] != "r1" {
		t.Fatalf("dead letters = %v %d %v", dls, n, err)
	}
	// A second letter of the same failure (as after a redrive that failed half-way): resumed
	// by the first, it is only deleted.
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.dead(), Values: []string{"x-run-id", "r1"}})
	moved, err := e.s.Redrive(e.ctx, 0, nil)
	if err != nil || moved != 2 {
		t.Fatalf("redrive = %d, %v", moved, err)
	}
	h := e.hgetall(e.k.run("r1"))
	if h["status"] != "running" || h["step"] != "reserve" || h["failed_step"] != "" {
		t.Errorf("redriven run = %v", h)
	}
	if d := e.pttl(e.k.run("r1")); d != -1 {
		t.Errorf("redriven run PTTL = %s, want none", d)
	}
	if dl := e.xrange(e.k.dead()); len(dl) != 0 {
		t.Errorf("dead letters left = %v", dl)
	}
	d = r.Next(t)
	if d.Run.Visit != h2i(t, h["visit"]) || d.Attempt != 1 || d.Run.State.(*workflow.Visit).Stale {
		t.Errorf("resumed visit = %+v attempt %d", d.Run, d.Attempt)
	}
}

func h2i(t *testing.T, s string) int {
	n, err := atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestHygieneTrimsSettledAndPrunesExpired(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		e.begin(id, `{}`)
	}
	r := e.stepSource("reserve", "w1", time.Minute)
	ack := func(context.Context, *engine.Delivery) engine.Result { return engine.Result{Outcome: engine.Ack()} }
	da, db := r.Next(t), r.Next(t)
	r.decide(t, da, handled(e.s.g, da, ack).Outcome) // a settled; b in flight; c read or not
	// An old run whose record expired.
	e.rdb.ZAdd(e.ctx, e.k.runs(), redis.Z{Score: 1, Member: "old"})
	if err := e.s.hygiene(e.ctx); err != nil {
		t.Fatal(err)
	}
	xs := e.xrange(e.k.step("reserve"))
	if len(xs) != 2 || fields(xs[0])["run"] != "b" {
		t.Errorf("reserve stream after trim = %v, want b's and c's", xs)
	}
	if z := e.zrange(e.k.runs()); len(z) != 3 {
		t.Errorf("runs index = %v", z)
	}
	r.decide(t, db, handled(e.s.g, db, ack).Outcome)
}

// One timer pass that keeps failing (here the delayed set is not a sorted set: WRONGTYPE for
// good) does not stop the others: the timeout still fires.
func TestTimersPassesRunIndependently(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	e.begin("r1", `{}`)
	e.toCharge("r1", now, 0, now.Add(100*time.Millisecond))
	e.rdb.Set(e.ctx, e.k.delayed(), "not a sorted set", 0)
	e.runTimers()
	e.waitFor("the timeout beside a failing delayed pass", 3*time.Second, func() bool {
		return e.hgetall(e.k.run("r1"))["status"] == "compensating"
	})
}
