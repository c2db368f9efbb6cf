package redisrun

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/workflow"
)

// newFanEnv is a test's Redis with the store of "mail": notify (for_each, max_items 3,
// compensated by undo) -> done; a failure compensates.
func newFanEnv(t *testing.T) *env {
	t.Helper()
	srv, rdb := redistest.Fresh(t)
	g := &workflow.Graph{Name: "mail", OnFailure: "stop", Retention: time.Hour, Steps: []workflow.StepDef{
		{Name: "notify", Next: "done", ForEach: true},
		{Name: "done"},
	}}
	return &env{t: t, srv: srv, rdb: rdb, ctx: context.Background(), s: NewStore(srv.Client(t), g), k: newKeys(g.Name)}
}

func (e *env) fanPending() int64 {
	e.t.Helper()
	p, err := e.rdb.XPending(e.ctx, e.k.step("notify"), "mail").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Count
}

// fanHandled runs d through the for_each handler: the list is list, each element's output
// is "out-" + its item, its outcome o.
func fanHandled(g *workflow.Graph, d *engine.Delivery, list []any, o engine.Outcome) engine.Result {
	return fanHandledMax(g, d, list, o, 3)
}

func fanHandledMax(g *workflow.Graph, d *engine.Delivery, list []any, o engine.Outcome, max int) engine.Result {
	inner := engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
		d.Run.Output, d.Run.HasOutput = fmt.Sprint("out-", d.Run.Item, " key ", d.Headers[engine.HeaderIdempotencyKey]), true
		return engine.Result{Outcome: o}
	})
	lf := func(*engine.Delivery) (any, error) { return list, nil }
	return workflow.NewForEachHandler(g, "notify", inner, nil, lf, max).Handle(context.Background(), d)
}

// fanOutRun starts run id and settles its fan message with list: the element deliveries
// read, by index.
func (e *env) fanOutRun(r *stepRun, id string, list []any) {
	e.t.Helper()
	e.begin(id, `{}`)
	d := r.Next(e.t)
	if _, ok := d.Headers[workflow.FieldIndex]; ok {
		e.t.Fatalf("first message of %s is an element: %v", id, d.Headers)
	}
	r.decide(e.t, d, fanHandled(e.s.g, d, list, engine.Ack()).Outcome)
}

func TestForEachJoinsInElementOrderOnce(t *testing.T) {
	e := newFanEnv(t)
	r := e.stepSource("notify", "w1", time.Minute)
	e.fanOutRun(r, "r1", []any{"a", "b", "c"})

	fe := e.hgetall(e.k.fanJoin("r1", 1))
	if fe["n"] != "3" || fe["c"] != "0" {
		t.Fatalf("join hash = %v", fe)
	}
	if m, _ := e.rdb.SMembers(e.ctx, e.k.fans()).Result(); len(m) != 1 || m[0] != "r1\n1" {
		t.Fatalf("fans = %v", m)
	}
	var els []*engine.Delivery
	for range 3 {
		els = append(els, r.Next(t))
	}
	sort.Slice(els, func(i, j int) bool { return els[i].Headers["index"] > els[j].Headers["index"] }) // ack in reverse
	for i, d := range els {
		res := fanHandled(e.s.g, d, nil, engine.Ack())
		r.decide(t, d, res.Outcome)
		if i == 0 {
			// The same element acked again (a takeover racing a slow process): nothing changes.
			d2 := *d
			d2.Run = &engine.Run{ID: d.Run.ID, Workflow: "mail", Step: "notify", Visit: 1, State: &workflow.Visit{State: d.Run.State.(*workflow.Visit).State}}
			d2.Headers = map[string]string{"run": "r1", "visit": "1", "index": d.Headers["index"], "item": `"zzz"`}
			r.decide(t, &d2, fanHandled(e.s.g, &d2, nil, engine.Ack()).Outcome)
			if fe := e.hgetall(e.k.fanJoin("r1", 1)); fe["c"] != "1" || !strings.HasPrefix(fe["2"], `"out-c`) {
				t.Fatalf("after a duplicate ack the join hash = %v", fe)
			}
		}
	}
	xs := e.xrange(e.k.step("notify"))
	var joins int
	for _, x := range xs {
		if fields(x)["join"] == "1" {
			joins++
		}
	}
	if joins != 1 {
		t.Fatalf("join messages = %d, want 1: %v", joins, xs)
	}
	j := r.Next(t)
	if j.Headers["join"] != "1" {
		t.Fatalf("next delivery is not the join: %v", j.Headers)
	}
	// The join delivered twice (read again after a crash): the second finds the visit gone.
	dup := *j
	dup.Run = &engine.Run{ID: "r1", Workflow: "mail", Step: "notify", Visit: 1, State: &workflow.Visit{State: j.Run.State.(*workflow.Visit).State}}
	dup.Headers = map[string]string{"run": "r1", "visit": "1", "join": "1"}
	r.decide(t, j, fanHandled(e.s.g, j, nil, engine.Ack()).Outcome)
	r.decide(t, &dup, fanHandled(e.s.g, &dup, nil, engine.Ack()).Outcome)

	h := e.hgetall(e.k.run("r1"))
	if h["step"] != "done" || h["visit"] != "2" || h["finished"] != `["notify"]` {
		t.Fatalf("run = %v", h)
	}
	want := `["out-a key mail/r1/notify/1/0","out-b key mail/r1/notify/1/1","out-c key mail/r1/notify/1/2"]`
	if o := e.hgetall(e.k.out("r1")); o["notify"] != want {
		t.Fatalf("output = %s, want %s", o["notify"], want)
	}
	if xs := e.xrange(e.k.step("done")); len(xs) != 1 {
		t.Fatalf("done messages = %d, want 1 (the step finished once)", len(xs))
	}
	st, err := e.s.Get(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var acks int
	for _, ev := range st.History {
		if ev.Step == "notify" && ev.Outcome == "ack" {
			acks++
		}
	}
	if acks != 1 {
		t.Fatalf("history has %d acks of notify, want 1: %+v", acks, st.History)
	}
	if n := e.fanPending(); n != 0 {
		t.Fatalf("pending = %d", n)
	}
	// Hygiene deletes the join hash of a visit that is over.
	if err := e.s.hygiene(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.rdb.Exists(e.ctx, e.k.fanJoin("r1", 1), e.k.fans()).Result(); n != 0 {
		t.Fatalf("join keys left after the visit: %d", n)
	}
}

func TestForEachFanMessageTwiceFansOutOnce(t *testing.T) {
	e := newFanEnv(t)
	r := e.stepSource("notify", "w1", time.Minute)
	e.begin("r1", `{}`)
	d := r.Next(t)
	list := []any{1.0, 2.0}
	r.decide(t, d, fanHandled(e.s.g, d, list, engine.Ack()).Outcome)
	again := *d
	again.Run = &engine.Run{ID: "r1", Workflow: "mail", Step: "notify", Visit: 1, State: &workflow.Visit{State: d.Run.State.(*workflow.Visit).State}}
	again.Headers = map[string]string{"run": "r1", "visit": "1"}
	r.decide(t, &again, fanHandled(e.s.g, &again, list, engine.Ack()).Outcome)
	var n int
	for _, x := range e.xrange(e.k.step("notify")) {
		if _, ok := fields(x)["index"]; ok {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("element messages = %d, want 2", n)
	}
	if fe := e.hgetall(e.k.fanJoin("r1", 1)); fe["n"] != "2" {
		t.Fatalf("join hash = %v", fe)
	}
}

func TestForEachEmptyListFinishesWithEmptyList(t *testing.T) {
	e := newFanEnv(t)
	r := e.stepSource("notify", "w1", time.Minute)
	e.fanOutRun(r, "r1", []any{})
	if o := e.hgetall(e.k.out("r1")); o["notify"] != "[]" {
		t.Fatalf("output = %v", o)
	}
	if h := e.hgetall(e.k.run("r1")); h["step"] != "done" {
		t.Fatalf("run = %v", h)
	}
	if n, _ := e.rdb.Exists(e.ctx, e.k.fanJoin("r1", 1)).Result(); n != 0 {
		t.Fatal("an empty list wrote a join hash")
	}
}

func TestForEachTooManyElementsFailsBeforeAnyRuns(t *testing.T) {
	e := newFanEnv(t)
	r := e.stepSource("notify", "w1", time.Minute)
	e.fanOutRun(r, "r1", []any{1.0, 2.0, 3.0, 4.0})
	h := e.hgetall(e.k.run("r1"))
	if h["status"] != "failed" || h["error"] != "for_each gave 4 elements, more than max_items (3)" || h["failed_step"] != "notify" {
		t.Fatalf("run = %v", h)
	}
	xs := e.xrange(e.k.step("notify"))
	if len(xs) != 1 {
		t.Fatalf("notify stream = %v, want the fan message only", xs)
	}
	if dl := e.xrange(e.k.dead()); len(dl) != 1 || fields(dl[0])["x-run-id"] != "r1" {
		t.Fatalf("dead letters = %v", dl)
	}
	if n := e.fanPending(); n != 0 {
		t.Fatalf("pending = %d", n)
	}
}

func TestForEachDeadElementFailsRun(t *testing.T) {
	e := newFanEnv(t)
	r := e.stepSource("notify", "w1", time.Minute)
	e.fanOutRun(r, "r1", []any{"a", "b", "c"})
	byIndex := map[string]*engine.Delivery{}
	for range 3 {
		d := r.Next(t)
		byIndex[d.Headers["index"]] = d
	}
	d := byIndex["0"]
	r.decide(t, d, fanHandled(e.s.g, d, nil, engine.Ack()).Outcome)
	d = byIndex["1"]
	r.decide(t, d, fanHandled(e.s.g, d, nil, engine.DeadLetter("bounced")).Outcome)
	// Element 2 was read before the run failed: its ack is stale and writes no join.
	d = byIndex["2"]
	r.decide(t, d, fanHandled(e.s.g, d, nil, engine.Ack()).Outcome)

	h := e.hgetall(e.k.run("r1"))
	if h["status"] != "failed" || h["error"] != "bounced" || h["failed_step"] != "notify" {
		t.Fatalf("run = %v", h)
	}
	dl := e.xrange(e.k.dead())
	if len(dl) != 1 {
		t.Fatalf("dead letters = %v", dl)
	}
	if f := fields(dl[0]); f["index"] != "1" || f["item"] != `"b"` || f["x-idempotency-key"] != "mail/r1/notify/1/1" || f["x-run-id"] != "r1" {
		t.Fatalf("dead letter = %v", f)
	}
	if fe := e.hgetall(e.k.fanJoin("r1", 1)); fe["c"] != "1" {
		t.Fatalf("join hash = %v", fe)
	}
	for _, x := range e.xrange(e.k.step("notify")) {
		if fields(x)["join"] != "" {
			t.Fatalf("a join was written for a failed run")
		}
	}
	if n := e.fanPending(); n != 0 {
		t.Fatalf("pending = %d", n)
	}
	if err := e.s.hygiene(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.rdb.Exists(e.ctx, e.k.fanJoin("r1", 1)).Result(); n != 0 {
		t.Fatal("the failed run's join hash is left")
	}
}

func TestForEachElementRetryKeepsItsElement(t *testing.T) {
	e := newFanEnv(t)
	r := e.stepSource("notify", "w1", time.Minute)
	e.fanOutRun(r, "r1", []any{map[string]any{"to": "a"}})
	d := r.Next(t)
	r.decide(t, d, fanHandled(e.s.g, d, nil, engine.Retry()).Outcome)
	d = r.Next(t)
	if d.Headers["index"] != "0" || d.Headers["item"] != `{"to":"a"}` || d.Headers[engine.HeaderRetryCount] != "1" {
		t.Fatalf("retry copy headers = %v", d.Headers)
	}
	res := fanHandled(e.s.g, d, nil, engine.Ack())
	if d.Run.Index != 0 || d.Run.Item.(map[string]any)["to"] != "a" {
		t.Fatalf("retry's run view item %v index %d", d.Run.Item, d.Run.Index)
	}
	r.decide(t, d, res.Outcome)
	j := r.Next(t)
	r.decide(t, j, fanHandled(e.s.g, j, nil, engine.Ack()).Outcome)
	if o := e.hgetall(e.k.out("r1")); o["notify"] != `["out-map[to:a] key mail/r1/notify/1/0"]` {
		t.Fatalf("output = %v", o)
	}
	if n := e.fanPending(); n != 0 {
		t.Fatalf("pending = %d", n)
	}
}

// A run cancelled while its elements run: the elements still in flight are stale, their acks
// record nothing and write no join.
func TestForEachCancelledMidFanOut(t *testing.T) {
	e := newFanEnv(t)
	r := e.stepSource("notify", "w1", time.Minute)
	e.fanOutRun(r, "r1", []any{"a", "b"})
	d0, d1 := r.Next(t), r.Next(t)
	r.decide(t, d0, fanHandled(e.s.g, d0, nil, engine.Ack()).Outcome)
	if err := e.s.Cancel(e.ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	r.decide(t, d1, fanHandled(e.s.g, d1, nil, engine.Ack()).Outcome)
	if h := e.hgetall(e.k.run("r1")); h["status"] != "cancelled" {
		t.Fatalf("run = %v", h)
	}
	if fe := e.hgetall(e.k.fanJoin("r1", 1)); fe["c"] != "1" {
		t.Fatalf("join hash = %v", fe)
	}
	for _, x := range e.xrange(e.k.step("notify")) {
		if fields(x)["join"] != "" {
			t.Fatal("a join was written for a cancelled run")
		}
	}
	if o := e.hgetall(e.k.out("r1")); len(o) != 0 {
		t.Fatalf("outputs = %v", o)
	}
	if n := e.fanPending(); n != 0 {
		t.Fatalf("pending = %d", n)
	}
}

// The default max_items, 1000 elements: one script writes them all, the join reads them all.
func TestForEachThousandElements(t *testing.T) {
	e := newFanEnv(t)
	r := e.stepSource("notify", "w1", time.Minute)
	e.begin("r1", `{}`)
	list := make([]any, workflow.DefaultMaxItems)
	for i := range list {
		list[i] = float64(i)
	}
	d := r.Next(t)
	r.decide(t, d, fanHandledMax(e.s.g, d, list, engine.Ack(), 0).Outcome)
	for range list {
		d := r.Next(t)
		r.decide(t, d, fanHandledMax(e.s.g, d, nil, engine.Ack(), 0).Outcome)
	}
	j := r.Next(t)
	r.decide(t, j, fanHandledMax(e.s.g, j, nil, engine.Ack(), 0).Outcome)
	st, err := e.s.Get(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if err := json.Unmarshal(st.Steps["notify"], &out); err != nil || len(out) != len(list) {
		t.Fatalf("output: %d elements, %v", len(out), err)
	}
	for i, o := range out {
		if want := fmt.Sprintf("out-%d key mail/r1/notify/1/%d", i, i); o != want {
			t.Fatalf("output %d = %q, want %q", i, o, want)
		}
	}
	if st.Step != "done" || e.fanPending() != 0 {
		t.Fatalf("run at %q, %d pending", st.Step, e.fanPending())
	}
}
