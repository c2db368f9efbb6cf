package redisrun

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// waitEnv is an env whose store runs pay (a wait, timeout 1m) -> ship.
func waitEnv(t *testing.T) *env {
	e := newEnv(t)
	g, err := workflow.NewGraph("order", "stop", time.Hour, []workflow.StepDef{
		{Name: "pay", Next: "ship", Timeout: time.Minute, Wait: true, KeepFor: time.Minute},
		{Name: "ship"},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.s = NewStore(e.s.c, g)
	return e
}

func correlateID(d *engine.Delivery) (string, error) {
	var v struct{ ID string }
	err := json.Unmarshal(d.Payload, &v)
	return v.ID, err
}

// event hands one event to the wait's events handler.
func (e *env) event(keep time.Duration, payload string) engine.Result {
	e.t.Helper()
	d := &engine.Delivery{Message: engine.Message{Payload: []byte(payload), Headers: map[string]string{}}, Attempt: 1}
	return e.s.EventHandler("pay", keep, correlateID).Handle(e.ctx, d)
}

// visitPay delivers pay's next step message through the wait handler and settles it.
func (e *env) visitPay(r *stepRun) *engine.Delivery {
	e.t.Helper()
	d := r.Next(e.t)
	res := e.s.WaitHandler().Handle(e.ctx, d)
	if res.Err != nil {
		e.t.Fatalf("wait handler: %v", res.Err)
	}
	r.decide(e.t, d, res.Outcome)
	return d
}

func TestWaitParksThenTheEventFinishesIt(t *testing.T) {
	e := waitEnv(t)
	e.begin("r1", `{}`)
	r := e.stepSource("pay", "w1", time.Minute)
	d := e.visitPay(r)
	if !d.Run.State.(*workflow.Visit).Park {
		t.Fatal("the visit did not park")
	}
	h := e.hgetall(e.k.run("r1"))
	if h["status"] != "waiting" || h["step"] != "pay" || h["visit"] != "1" {
		t.Fatalf("run = %v", h)
	}
	if n := e.pending("pay"); n != 0 {
		t.Errorf("pending step messages = %d", n)
	}
	if res := e.event(time.Minute, `{"id":"r1","ok":true}`); res.Outcome.Kind != engine.KindAck || res.Err != nil {
		t.Fatalf("event: %+v", res)
	}
	h = e.hgetall(e.k.run("r1"))
	if h["status"] != "running" || h["step"] != "ship" || h["visit"] != "2" {
		t.Errorf("run = %v", h)
	}
	if out := e.hgetall(e.k.out("r1")); out["pay"] != `{"id":"r1","ok":true}` {
		t.Errorf("outputs = %v", out)
	}
	if z := e.zrange(e.k.timeouts()); len(z) != 0 {
		t.Errorf("timeouts left = %v", z)
	}
	// The same event again (a redelivery after a crash before its acknowledgement): a
	// duplicate, not kept.
	if res := e.event(time.Minute, `{"id": "r1", "ok": true}`); res.Outcome.Kind != engine.KindAck || !res.Duplicate {
		t.Errorf("the event again: %+v", res)
	}
	// Another event for it: the run has moved on, so it is kept (it may come back to pay).
	if res := e.event(time.Minute, `{"id":"r1","ok":false}`); res.Outcome.Kind != engine.KindAck || res.Duplicate {
		t.Errorf("second event: %+v", res)
	}
	if k := e.hgetall(e.k.kept()); k["pay\nr1"] != `{"id":"r1","ok":false}` {
		t.Errorf("kept = %v", k)
	}
}

func TestEventBeforeItsRunIsKeptAndFinishesTheVisit(t *testing.T) {
	e := waitEnv(t)
	if res := e.event(time.Minute, `{"id":"r2","n":1}`); res.Outcome.Kind != engine.KindAck {
		t.Fatalf("event: %+v", res)
	}
	if res := e.event(time.Minute, `{"id":"r2","n":2}`); res.Outcome.Kind != engine.KindDeadLetter {
		t.Errorf("a second kept event: %+v, want a rejection", res)
	}
	if k := e.hgetall(e.k.kept()); k["pay\nr2"] != `{"id":"r2","n":1}` {
		t.Fatalf("kept = %v", k)
	}
	e.begin("r2", `{}`)
	r := e.stepSource("pay", "w1", time.Minute)
	e.visitPay(r) // hands the kept event on as a step message
	if k := e.hgetall(e.k.kept()); len(k) != 0 {
		t.Errorf("kept after the visit = %v", k)
	}
	if z := e.zrange(e.k.keptDue()); len(z) != 0 {
		t.Errorf("kept_due after the visit = %v", z)
	}
	d := e.visitPay(r)
	if d.Headers[hdrEvent] != "1" {
		t.Fatalf("second delivery = %v", d.Headers)
	}
	h := e.hgetall(e.k.run("r2"))
	if h["status"] != "running" || h["step"] != "ship" {
		t.Errorf("run = %v", h)
	}
	if out := e.hgetall(e.k.out("r2")); out["pay"] != `{"id":"r2","n":1}` {
		t.Errorf("outputs = %v", out)
	}
	if n := e.pending("pay"); n != 0 {
		t.Errorf("pending step messages = %d", n)
	}
}

func TestUnmatchedEventExpiresRejected(t *testing.T) {
	e := waitEnv(t)
	var rejected atomic.Int64
	e.s.OnRejected = func(step string) {
		if step == "pay" {
			rejected.Add(1)
		}
	}
	e.event(100*time.Millisecond, `{"id":"nobody"}`)
	if res := e.event(time.Minute, `{"nope":1}`); res.Outcome.Kind != engine.KindDeadLetter {
		t.Errorf("an event without an id: %+v", res)
	}
	e.runTimers()
	e.waitFor("the kept event to expire", 3*time.Second, func() bool { return rejected.Load() == 1 })
	if k := e.hgetall(e.k.kept()); len(k) != 0 {
		t.Errorf("kept = %v", k)
	}
	if z := e.zrange(e.k.keptDue()); len(z) != 0 {
		t.Errorf("kept_due = %v", z)
	}
}

func TestWaitTimesOutToFailure(t *testing.T) {
	e := waitEnv(t)
	st, tr := e.s.g.Start("r3", json.RawMessage(`{}`), time.Now().Add(-time.Minute))
	if ok, err := e.s.Create(context.Background(), st, tr); err != nil || !ok {
		t.Fatal(ok, err)
	}
	r := e.stepSource("pay", "w1", time.Minute)
	e.visitPay(r)
	e.runTimers()
	e.waitFor("the timeout", 3*time.Second, func() bool { return e.hgetall(e.k.run("r3"))["status"] == "failed" })
	if h := e.hgetall(e.k.run("r3")); h["error"] != "timeout" || h["failed_step"] != "pay" {
		t.Errorf("run = %v", h)
	}
	if res := e.event(time.Minute, `{"id":"r3"}`); res.Outcome.Kind != engine.KindDeadLetter {
		t.Errorf("an event for an ended run: %+v", res)
	}
}

// Runs entering the wait and their events racing: whichever comes first, every run finishes
// its wait once, with its own event, and nothing is left kept or pending.
func TestWaitAndEventsRaceLoseNothing(t *testing.T) {
	e := waitEnv(t)
	const runs = 300
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	pay := &engine.Pipeline{Name: "order/pay", Concurrency: 8, DeadLetter: e.s.DeadLetterKey(), Logger: zerolog.Nop(),
		Source:  e.s.StepSource("pay", StepOptions{Consumer: "p", Block: 50 * time.Millisecond}, zerolog.Nop()),
		Handler: e.s.WaitHandler()}
	done := make(chan struct{})
	go func() { defer close(done); _ = engine.New(engine.Options{}, pay).Run(ctx) }()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < runs; i += 4 {
				id := "r" + itoa(i)
				if i%2 == 0 { // half the events first
					e.event(time.Minute, `{"id":"`+id+`","n":`+itoa(i)+`}`)
					e.begin(id, `{}`)
				} else {
					e.begin(id, `{}`)
					e.event(time.Minute, `{"id":"`+id+`","n":`+itoa(i)+`}`)
				}
			}
		}()
	}
	wg.Wait()
	e.waitFor("every run past its wait", 30*time.Second, func() bool {
		a, _ := e.s.Active(e.ctx)
		return a["ship"] == runs
	})
	cancel()
	<-done
	for i := range runs {
		id := "r" + itoa(i)
		if out := e.hgetall(e.k.out(id)); out["pay"] != `{"id":"`+id+`","n":`+itoa(i)+`}` {
			t.Errorf("run %s outputs %v", id, out)
		}
		if h := e.hgetall(e.k.run(id)); h["step"] != "ship" || h["status"] != "running" || h["visit"] != "2" {
			t.Errorf("run %s = %v", id, h)
		}
	}
	if k := e.hgetall(e.k.kept()); len(k) != 0 {
		t.Errorf("%d events left kept", len(k))
	}
	if n := e.pending("pay"); n != 0 {
		t.Errorf("%d step messages pending", n)
	}
}

// A park is a settlement, not the handler's work: a Redis that fails under it is a passing
// settlement fault (resent by the engine with backoff), never an attempt of the visit counted
// against its cap.
func TestParkFailureIsASettlementFault(t *testing.T) {
	e := waitEnv(t)
	e.begin("r1", `{}`)
	r := e.stepSource("pay", "w1", time.Minute)
	d := r.Next(t)
	res := e.s.WaitHandler().Handle(e.ctx, d)
	if res.Err != nil || res.Outcome.Kind != engine.KindAck {
		t.Fatalf("the wait handler did I/O or failed: %+v", res)
	}
	st := r.policy.Decide(d, res.Outcome, nil, time.Now()).Settlement
	e.srv.Kill()
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	err := r.src.Settle(ctx, []engine.Settlement{st})
	var se *engine.SettleError
	if !errors.As(err, &se) || len(se.Faults) != 1 || se.Faults[0].Permanent {
		t.Fatalf("settle with Redis gone = %v, want one passing fault", err)
	}
}
