package redisrun

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/flowrun/flowrun/workflow"
)

func TestCreateWritesRunAndFirstStep(t *testing.T) {
	e := newEnv(t)
	now := time.UnixMilli(1_700_000_000_000)
	e.create("r1", now)

	h := e.hgetall(e.k.run("r1"))
	want := map[string]string{"status": "running", "step": "reserve", "visit": "1", "input": `{"sku":"a"}`,
		"fingerprint": "fp1", "started_at": "1700000000000"}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("run %s = %q, want %q", k, h[k], v)
		}
	}
	// What is empty is not written: a run waiting in Redis costs only what it holds.
	for _, k := range []string{"error", "finished", "pending", "ending", "failed_step", "compensated", "trace"} {
		if v, ok := h[k]; ok {
			t.Errorf("run %s = %q written; an empty field is left out", k, v)
		}
	}
	xs := e.xrange(e.k.step("reserve"))
	if len(xs) != 1 || fields(xs[0])["run"] != "r1" || fields(xs[0])["visit"] != "1" {
		t.Fatalf("reserve stream = %v", xs)
	}
	if z := e.zrange(e.k.runs()); len(z) != 1 || z[0].Member != "r1" || z[0].Score != 1_700_000_000_000 {
		t.Errorf("runs index = %v", z)
	}
	if a := e.hgetall(e.k.active()); a["reserve"] != "1" {
		t.Errorf("active = %v", a)
	}
	if n := e.llen(e.k.hist("r1")); n != 1 {
		t.Errorf("history length %d", n)
	}

	// A second create of the id starts nothing.
	st := &workflow.State{ID: "r1", Status: workflow.Running, Step: "reserve", Visit: 1, StartedAt: now}
	ok, err := e.s.Create(e.ctx, st, workflow.Transition{Run: "r1", Enter: "reserve", At: now})
	if err != nil || ok {
		t.Fatalf("duplicate create: %v %v", ok, err)
	}
	if xs := e.xrange(e.k.step("reserve")); len(xs) != 1 {
		t.Errorf("duplicate create wrote a step message: %d", len(xs))
	}
}

func TestApplyMovesToNextStepOnce(t *testing.T) {
	e := newEnv(t)
	now := time.Now().Truncate(time.Millisecond)
	e.create("r1", now)
	deadline := now.Add(time.Minute)
	tr := workflow.Transition{Run: "r1", Visit: 1, Step: "reserve", Output: json.RawMessage(`{"id":7}`), HasOutput: true,
		History: []workflow.Event{{Step: "reserve", Visit: 1, Attempt: 1, Outcome: "ack", At: now}},
		Status:  workflow.Running, Enter: "charge", EnterDeadline: deadline, Finished: []string{"reserve"}, At: now}
	ok, err := e.s.Apply(e.ctx, tr)
	if err != nil || !ok {
		t.Fatalf("apply: %v %v", ok, err)
	}
	h := e.hgetall(e.k.run("r1"))
	if h["step"] != "charge" || h["visit"] != "2" || h["finished"] != `["reserve"]` {
		t.Errorf("run = %v", h)
	}
	if o := e.hgetall(e.k.out("r1")); o["reserve"] != `{"id":7}` {
		t.Errorf("outputs = %v", o)
	}
	xs := e.xrange(e.k.step("charge"))
	if len(xs) != 1 || fields(xs[0])["visit"] != "2" {
		t.Fatalf("charge stream = %v", xs)
	}
	if a := e.hgetall(e.k.active()); a["reserve"] != "0" || a["charge"] != "1" {
		t.Errorf("active = %v", a)
	}
	if z := e.zrange(e.k.timeouts()); len(z) != 1 || z[0].Member != "r1\n2" || int64(z[0].Score) != deadline.UnixMilli() {
		t.Errorf("timeouts = %v", z)
	}

	// The same visit again (a redelivered message) changes nothing.
	ok, err = e.s.Apply(e.ctx, tr)
	if err != nil || ok {
		t.Fatalf("stale apply: %v %v", ok, err)
	}
	if xs := e.xrange(e.k.step("charge")); len(xs) != 1 {
		t.Errorf("stale apply wrote a message: %d", len(xs))
	}
	if n := e.llen(e.k.hist("r1")); n != 2 {
		t.Errorf("history length %d, want 2", n)
	}

	st, err := e.s.Get(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != "charge" || st.Visit != 2 || string(st.Steps["reserve"]) != `{"id":7}` || len(st.History) != 2 ||
		st.History[1].Outcome != "ack" || !st.StartedAt.Equal(now) {
		t.Errorf("Get = %+v", st)
	}
}

func TestDoneExpiresAfterRetention(t *testing.T) {
	e := newEnv(t)
	start := time.Now().Add(-3 * time.Second).Truncate(time.Millisecond)
	e.create("r1", start)
	var took time.Duration
	var status workflow.Status
	e.s.OnDone = func(st workflow.Status, d time.Duration) { status, took = st, d }
	now := start.Add(3 * time.Second)
	ok, err := e.s.Apply(e.ctx, workflow.Transition{Run: "r1", Visit: 1, Step: "reserve", HasOutput: true,
		Output: json.RawMessage(`1`), Status: workflow.Completed, Done: true, At: now, Finished: []string{"reserve"},
		History: []workflow.Event{{Step: "reserve", Visit: 1, Outcome: "ack", At: now}, {Outcome: workflow.EventCompleted, At: now}}})
	if err != nil || !ok {
		t.Fatalf("apply: %v %v", ok, err)
	}
	for _, k := range []string{e.k.run("r1"), e.k.out("r1"), e.k.hist("r1")} {
		if d := e.pttl(k); d <= 59*time.Minute || d > time.Hour {
			t.Errorf("PTTL %s = %s, want about the retention (1h)", k, d)
		}
	}
	if a := e.hgetall(e.k.active()); a["reserve"] != "0" {
		t.Errorf("active = %v", a)
	}
	if status != workflow.Completed || took != 3*time.Second {
		t.Errorf("OnDone(%s, %s)", status, took)
	}
	h := e.hgetall(e.k.run("r1"))
	if h["step"] != "" || h["status"] != "completed" || h["visit"] != "1" {
		t.Errorf("run = %v", h)
	}

	// A transition decided before the run ended (a cancel racing its last step) finds it
	// ended and changes nothing, though the visit is the same.
	late := workflow.Transition{Run: "r1", Visit: 1, Status: workflow.Running, Enter: "charge", At: now}
	if ok, err := e.s.Apply(e.ctx, late); err != nil || ok {
		t.Fatalf("late apply: %v %v", ok, err)
	}
	// A retry of an ended run (here by hand) applies, and makes it keep again.
	ok, err = e.s.exec(e.ctx, applyOp{t: late, resume: true})
	if err != nil || !ok {
		t.Fatalf("resume: %v %v", ok, err)
	}
	if h := e.hgetall(e.k.run("r1")); h["visit"] != "2" || h["step"] != "charge" {
		t.Errorf("resumed run = %v", h)
	}
	if d := e.pttl(e.k.run("r1")); d != -1 {
		t.Errorf("PTTL of an active run = %s, want none", d)
	}
}

func TestEnterDelayIsDurable(t *testing.T) {
	e := newEnv(t)
	now := time.Now().Truncate(time.Millisecond)
	e.create("r1", now)
	ok, err := e.s.Apply(e.ctx, workflow.Transition{Run: "r1", Visit: 1, Status: workflow.Running, Enter: "charge",
		EnterDelay: time.Minute, At: now})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if xs := e.xrange(e.k.step("charge")); len(xs) != 0 {
		t.Errorf("delayed step written at once: %v", xs)
	}
	z := e.zrange(e.k.delayed())
	if len(z) != 1 || int64(z[0].Score) != now.Add(time.Minute).UnixMilli() ||
		z[0].Member != `{"step":"charge","f":["run","r1","visit","2"]}` {
		t.Errorf("delayed = %v", z)
	}
}

func TestListCountsAndPrune(t *testing.T) {
	e := newEnv(t)
	now := time.Now().Truncate(time.Millisecond)
	for i, id := range []string{"a", "b", "c"} {
		e.create(id, now.Add(time.Duration(i)*time.Second))
	}
	ok, err := e.s.Apply(e.ctx, workflow.Transition{Run: "b", Visit: 1, Status: workflow.Failed, Done: true, At: now})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	l, err := e.s.List(e.ctx, "", 0)
	if err != nil || len(l) != 3 || l[0].ID != "c" || l[2].ID != "a" {
		t.Fatalf("List = %v, %v", l, err)
	}
	l, err = e.s.List(e.ctx, workflow.Failed, 10)
	if err != nil || len(l) != 1 || l[0].ID != "b" {
		t.Fatalf("List failed = %v, %v", l, err)
	}
	active, by, err := e.s.Counts(e.ctx)
	if err != nil || active["reserve"] != 2 || by[workflow.Running] != 2 || by[workflow.Failed] != 1 {
		t.Fatalf("Counts = %v %v %v", active, by, err)
	}
	// An expired run is skipped when listed; the index keeps it until the hygiene pass prunes
	// it, since a read changes nothing (the status page lists with GETs, SPEC §15).
	e.rdb.Del(e.ctx, e.k.run("a"))
	if l, _ := e.s.List(e.ctx, "", 0); len(l) != 2 {
		t.Errorf("List after expiry = %d runs", len(l))
	}
	if _, by, _ := e.s.Counts(e.ctx); by[workflow.Running] != 1 {
		t.Errorf("Counts after expiry = %v", by)
	}
	if z := e.zrange(e.k.runs()); len(z) != 3 {
		t.Errorf("a read changed the runs index: %v", z)
	}
	if _, err := e.s.Get(e.ctx, "a"); !errors.Is(err, workflow.ErrNoRun) {
		t.Errorf("Get expired = %v", err)
	}
}
