package redisrun

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/transporttest"
	"github.com/flowrun/flowrun/workflow"
)

// stepRun is a step source of the test's store with Receive running.
type stepRun struct {
	*transporttest.Receiver
	src    engine.Source
	policy engine.Policy
}

func (e *env) stepSource(step, consumer string, minIdle time.Duration) *stepRun {
	e.t.Helper()
	src := e.s.StepSource(step, StepOptions{Consumer: consumer, Batch: 10, Block: 50 * time.Millisecond, MinIdle: minIdle},
		zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel))
	return &stepRun{
		Receiver: transporttest.Receive(e.t, src, 10), src: src,
		policy: engine.Policy{MaxAttempts: 3, DeadLetter: e.k.dead(), Caps: src.Capabilities()},
	}
}

// decide settles d as the engine would after its handler returned o.
func (r *stepRun) decide(t *testing.T, d *engine.Delivery, o engine.Outcome) engine.Settlement {
	t.Helper()
	s := r.policy.Decide(d, o, nil, time.Now()).Settlement
	if err := r.src.Settle(context.Background(), []engine.Settlement{s}); err != nil {
		t.Fatalf("settle %s: %v", o, err)
	}
	return s
}

// begin starts a run through the graph.
func (e *env) begin(id, input string) {
	e.t.Helper()
	st, tr := e.s.g.Start(id, json.RawMessage(input), time.Now())
	if ok, err := e.s.Create(e.ctx, st, tr); err != nil || !ok {
		e.t.Fatalf("create %s: %v %v", id, ok, err)
	}
}

func (e *env) pending(step string) int64 {
	e.t.Helper()
	p, err := e.rdb.XPending(e.ctx, e.k.step(step), "order").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Count
}

// handled runs d through the workflow's step handler with inner, as the step pipeline does.
func handled(g *workflow.Graph, d *engine.Delivery, inner engine.HandlerFunc) engine.Result {
	return workflow.NewStepHandler(g, d.Run.Step, inner, nil).Handle(context.Background(), d)
}

func TestStepAckRecordsOutputAndEntersNext(t *testing.T) {
	e := newEnv(t)
	e.begin("r1", `{"sku":"a"}`)
	r := e.stepSource("reserve", "w1", time.Minute)
	d := r.Next(t)
	v := d.Run.State.(*workflow.Visit)
	if d.Run.ID != "r1" || d.Run.Visit != 1 || v.Stale || d.Run.Input.(map[string]any)["sku"] != "a" {
		t.Fatalf("run view = %+v, visit %+v", d.Run, v)
	}
	res := handled(e.s.g, d, func(_ context.Context, d *engine.Delivery) engine.Result {
		if d.Headers[engine.HeaderIdempotencyKey] != "order/r1/reserve/1" || string(d.Payload) != `{"sku":"a"}` {
			t.Errorf("handler saw headers %v payload %s", d.Headers, d.Payload)
		}
		d.Run.Output, d.Run.HasOutput = map[string]any{"id": 7}, true
		return engine.Result{Outcome: engine.Ack()}
	})
	r.decide(t, d, res.Outcome)

	h := e.hgetall(e.k.run("r1"))
	if h["step"] != "charge" || h["visit"] != "2" || h["finished"] != `["reserve"]` {
		t.Errorf("run = %v", h)
	}
	if o := e.hgetall(e.k.out("r1")); o["reserve"] != `{"id":7}` {
		t.Errorf("outputs = %v", o)
	}
	if n := e.pending("reserve"); n != 0 {
		t.Errorf("reserve pending = %d", n)
	}
	if xs := e.xrange(e.k.step("charge")); len(xs) != 1 || fields(xs[0])["visit"] != "2" {
		t.Errorf("charge stream = %v", xs)
	}
	if z := e.zrange(e.k.timeouts()); len(z) != 1 || z[0].Member != "r1\n2" {
		t.Errorf("timeouts = %v (charge has a timeout)", z)
	}
	// charge is last: its ack completes the run, which expires after the retention.
	r2 := e.stepSource("charge", "w1", time.Minute)
	d = r2.Next(t)
	if s := d.Run.Steps["reserve"].(map[string]any)["id"]; s != float64(7) {
		t.Errorf("steps.reserve.id = %v", s)
	}
	res = handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result { return engine.Result{Outcome: engine.Ack()} })
	r2.decide(t, d, res.Outcome)
	if h := e.hgetall(e.k.run("r1")); h["status"] != "completed" || h["step"] != "" {
		t.Errorf("run = %v", h)
	}
	if d := e.pttl(e.k.run("r1")); d <= 0 {
		t.Errorf("completed run PTTL = %s", d)
	}
	if z := e.zrange(e.k.timeouts()); len(z) != 0 {
		t.Errorf("timeouts after completion = %v", z)
	}
}

func TestStaleVisitAckedUnrun(t *testing.T) {
	e := newEnv(t)
	e.begin("r1", `1`)
	r := e.stepSource("reserve", "w1", time.Minute)
	d := r.Next(t)
	r.decide(t, d, handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
		return engine.Result{Outcome: engine.Ack()}
	}).Outcome)
	// A second message of visit 1 (a copy that outlived its visit), and one of a run that does
	// not exist. (A duplicate read in the same batch as the visit it repeats runs its handler,
	// since its run was read with it; its settlement then finds the visit gone and only
	// acknowledges it.)
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.step("reserve"), Values: []string{"run", "r1", "visit", "1"}})
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.step("reserve"), Values: []string{"run", "nope", "visit", "1"}})
	for range 2 {
		d := r.Next(t)
		ran := false
		res := handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
			ran = true
			return engine.Result{Outcome: engine.Ack()}
		})
		if ran || !res.Duplicate {
			t.Fatalf("stale visit of %s: ran %v, result %+v", d.Run.ID, ran, res)
		}
		r.decide(t, d, res.Outcome)
	}
	if n := e.pending("reserve"); n != 0 {
		t.Errorf("pending = %d", n)
	}
	if xs := e.xrange(e.k.step("charge")); len(xs) != 1 {
		t.Errorf("charge messages = %d, want 1 (the run advanced once)", len(xs))
	}
	if n := e.llen(e.k.hist("r1")); n != 2 {
		t.Errorf("history = %d entries, want 2", n)
	}
}

func TestStepDeadLetterFailsRunAndCompensates(t *testing.T) {
	e := newEnv(t)
	e.begin("r1", `{}`)
	r := e.stepSource("reserve", "w1", time.Minute)
	d := r.Next(t)
	r.decide(t, d, handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
		return engine.Result{Outcome: engine.Ack()}
	}).Outcome)
	rc := e.stepSource("charge", "w1", time.Minute)
	d = rc.Next(t)
	res := handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
		return engine.Result{Outcome: engine.DeadLetter("card declined")}
	})
	rc.decide(t, d, res.Outcome)

	h := e.hgetall(e.k.run("r1"))
	if h["status"] != "compensating" || h["step"] != "release" || h["failed_step"] != "charge" || h["error"] != "card declined" {
		t.Errorf("run = %v", h)
	}
	dl := e.xrange(e.k.dead())
	if len(dl) != 1 {
		t.Fatalf("dead letters = %v", dl)
	}
	f := fields(dl[0])
	if f["x-run-id"] != "r1" || f["x-dead-letter-reason"] != "card declined" || f["x-original-key"] != e.k.step("charge") ||
		f["x-attempts"] != "1" || f["x-idempotency-key"] != "order/r1/charge/2" {
		t.Errorf("dead letter = %v", f)
	}
	if n := e.pending("charge"); n != 0 {
		t.Errorf("charge pending = %d", n)
	}
	if xs := e.xrange(e.k.step("release")); len(xs) != 1 {
		t.Errorf("release messages = %v", xs)
	}
	if a := e.hgetall(e.k.active()); a["charge"] != "0" || a["release"] != "1" {
		t.Errorf("active = %v", a)
	}
}

func TestStepRetryCopiesOnceAndDelayIsDurable(t *testing.T) {
	e := newEnv(t)
	e.begin("r1", `{}`)
	r := e.stepSource("reserve", "w1", time.Minute)
	d := r.Next(t)
	res := handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result { return engine.Result{Outcome: engine.Retry()} })
	s := r.decide(t, d, res.Outcome)
	if s.Action != engine.ActRequeue {
		t.Fatalf("action %s", s.Action)
	}
	// The engine sends a batch again after a lost reply: no second copy.
	if err := r.src.Settle(e.ctx, []engine.Settlement{s}); err != nil {
		t.Fatal(err)
	}
	xs := e.xrange(e.k.step("reserve"))
	if len(xs) != 2 {
		t.Fatalf("reserve stream = %v, want the original and one copy", xs)
	}
	if f := fields(xs[1]); f["run"] != "r1" || f["visit"] != "1" || f["x-retry-count"] != "1" || f["payload"] != "" ||
		f["x-idempotency-key"] != "" {
		t.Errorf("copy = %v", f)
	}
	d = r.Next(t)
	if d.Attempt != 2 {
		t.Errorf("copy's attempt = %d", d.Attempt)
	}
	res = handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
		return engine.Result{Outcome: engine.RetryAfter(time.Hour)}
	})
	s = r.decide(t, d, res.Outcome)
	if s.Action != engine.ActDelay {
		t.Fatalf("action %s", s.Action)
	}
	z := e.zrange(e.k.delayed())
	if len(z) != 1 || z[0].Member != `{"step":"reserve","f":["run","r1","visit","1","x-retry-count","2"]}` ||
		int64(z[0].Score) != s.Due.UnixMilli() {
		t.Errorf("delayed = %v", z)
	}
	if n := e.pending("reserve"); n != 0 {
		t.Errorf("pending = %d", n)
	}
	st, err := e.s.Get(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range st.History {
		got = append(got, fmt.Sprintf("%s:%s:%d", ev.Step, ev.Outcome, ev.Attempt))
	}
	if fmt.Sprint(got) != "[:started:0 reserve:retry:1 reserve:retry_after:2]" {
		t.Errorf("history = %v", got)
	}
}

func TestTwoConsumersShareAStep(t *testing.T) {
	e := newEnv(t)
	const runs = 30
	for i := range runs {
		e.begin(itoa(i), `{}`)
	}
	a := e.stepSource("reserve", "a", time.Minute)
	b := e.stepSource("reserve", "b", time.Minute)
	seen := map[string]string{}
	for len(seen) < runs {
		var d *engine.Delivery
		var r *stepRun
		select {
		case d = <-a.Out():
			r = a
		case d = <-b.Out():
			r = b
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d delivered", len(seen), runs)
		}
		if prev, dup := seen[d.Run.ID]; dup {
			t.Fatalf("run %s delivered twice (%s)", d.Run.ID, prev)
		}
		seen[d.Run.ID] = d.ID
		r.decide(t, d, handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
			return engine.Result{Outcome: engine.Ack()}
		}).Outcome)
	}
	if xs := e.xrange(e.k.step("charge")); len(xs) != runs {
		t.Errorf("charge messages = %d", len(xs))
	}
	if a := e.hgetall(e.k.active()); a["charge"] != itoa(runs) || a["reserve"] != "0" {
		t.Errorf("active = %v", a)
	}
}

func TestTakeOverDeadConsumersEntry(t *testing.T) {
	e := newEnv(t)
	e.begin("r1", `{}`)
	// A consumer that read the entry and died.
	if err := e.rdb.XGroupCreateMkStream(e.ctx, e.k.step("reserve"), "order", "0").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "order", Consumer: "dead",
		Streams: []string{e.k.step("reserve"), ">"}, Count: 1}).Result()
	if err != nil || len(got[0].Messages) != 1 {
		t.Fatal(got, err)
	}
	id := got[0].Messages[0].ID
	r := e.stepSource("reserve", "alive", 100*time.Millisecond)
	d := r.Next(t)
	if d.ID != id || d.Run.ID != "r1" {
		t.Fatalf("took over %s of %s, want %s", d.ID, d.Run.ID, id)
	}
	p, err := e.rdb.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: e.k.step("reserve"), Group: "order",
		Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(p) != 1 || p[0].Consumer != "alive" {
		t.Fatalf("pending = %v %v", p, err)
	}
	r.decide(t, d, handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
		return engine.Result{Outcome: engine.Ack()}
	}).Outcome)
	if n := e.pending("reserve"); n != 0 {
		t.Errorf("pending = %d", n)
	}
}

func TestOwnPendingReadAgainAtStart(t *testing.T) {
	e := newEnv(t)
	e.begin("r1", `{}`)
	r := e.stepSource("reserve", "w1", time.Hour)
	d := r.Next(t)
	r.Stop(t) // a crash: the entry stays pending for w1
	r2 := e.stepSource("reserve", "w1", time.Hour)
	if d2 := r2.Next(t); d2.ID != d.ID {
		t.Fatalf("re-read %s, want %s", d2.ID, d.ID)
	}
}

func TestDuplicateInOneBatchAdvancesOnce(t *testing.T) {
	e := newEnv(t)
	e.begin("r1", `{}`)
	e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.step("reserve"), Values: []string{"run", "r1", "visit", "1"}})
	r := e.stepSource("reserve", "w1", time.Minute)
	ack := func(context.Context, *engine.Delivery) engine.Result { return engine.Result{Outcome: engine.Ack()} }
	d1, d2 := r.Next(t), r.Next(t)
	handled(e.s.g, d1, ack)
	handled(e.s.g, d2, ack)
	p := r.policy
	batch := []engine.Settlement{p.Decide(d1, engine.Ack(), nil, time.Now()).Settlement, p.Decide(d2, engine.Ack(), nil, time.Now()).Settlement}
	if err := r.src.Settle(e.ctx, batch); err != nil {
		t.Fatal(err)
	}
	if xs := e.xrange(e.k.step("charge")); len(xs) != 1 {
		t.Errorf("charge messages = %d, want 1", len(xs))
	}
	if n := e.pending("reserve"); n != 0 {
		t.Errorf("pending = %d", n)
	}
	if h := e.hgetall(e.k.run("r1")); h["visit"] != "2" {
		t.Errorf("visit = %s", h["visit"])
	}
}

func TestSlowHandlerNotTakenOver(t *testing.T) {
	e := newEnv(t)
	e.begin("r1", `{}`)
	a := e.stepSource("reserve", "a", 150*time.Millisecond)
	d := a.Next(t)
	b := e.stepSource("reserve", "b", 150*time.Millisecond)
	select {
	case d2 := <-b.Out():
		t.Fatalf("b took over %s while a's handler ran", d2.ID)
	case <-time.After(700 * time.Millisecond): // several min_idle
	}
	a.decide(t, d, handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
		return engine.Result{Outcome: engine.Ack()}
	}).Outcome)
	if n := e.pending("reserve"); n != 0 {
		t.Errorf("pending = %d", n)
	}
}

// A step whose expressions read neither input nor steps gets neither, and still moves the run
// on exactly as one that reads them: the handler's payload is the input's bytes all the same.
func TestStepSkipsWhatItDoesNotRead(t *testing.T) {
	e := newEnv(t)
	e.begin("r1", `{"sku":"a"}`)
	if ok, err := e.s.Apply(e.ctx, workflow.Transition{Run: "r1", Visit: 1, Status: workflow.Running, Step: "reserve",
		Enter: "charge", Finished: []string{"reserve"}, HasOutput: true, Output: json.RawMessage(`7`), At: time.Now()}); err != nil || !ok {
		t.Fatalf("apply: %v %v", ok, err)
	}
	src := e.s.StepSource("charge", StepOptions{Consumer: "w", Batch: 10, Block: 50 * time.Millisecond, SkipInput: true, SkipSteps: true},
		zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	r := &stepRun{Receiver: transporttest.Receive(t, src, 10), src: src,
		policy: engine.Policy{MaxAttempts: 3, DeadLetter: e.k.dead(), Caps: src.Capabilities()}}
	d := r.Next(t)
	if d.Run.Input != nil || d.Run.Steps != nil || d.Run.Visit != 2 {
		t.Fatalf("run view = %+v: want no input, no steps, visit 2", d.Run)
	}
	res := handled(e.s.g, d, func(_ context.Context, d *engine.Delivery) engine.Result {
		if string(d.Payload) != `{"sku":"a"}` {
			t.Errorf("payload %s, want the input's bytes", d.Payload)
		}
		return engine.Result{Outcome: engine.Ack()}
	})
	r.decide(t, d, res.Outcome)
	if h := e.hgetall(e.k.run("r1")); h["status"] != "completed" || h["finished"] != `["reserve","charge"]` {
		t.Errorf("run = %v", h)
	}
	if o := e.hgetall(e.k.out("r1")); o["reserve"] != "7" {
		t.Errorf("outputs = %v: the earlier output must stay", o)
	}
}
