package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

type recordingHandler struct {
	calls  int
	got    *engine.Delivery
	result engine.Result
}

func (r *recordingHandler) Handle(_ context.Context, d *engine.Delivery) engine.Result {
	r.calls++
	c := *d
	r.got = &c
	return r.result
}

type inlineRecording struct{ *recordingHandler }

func (inlineRecording) Inline() bool { return true }

func stepDelivery(st *State, stale bool) *engine.Delivery {
	return &engine.Delivery{
		Message: engine.Message{Key: "flowrun:{order}:s:reserve", Headers: map[string]string{"x-retry-count": "1"}},
		Run:     &engine.Run{ID: st.ID, Workflow: st.Workflow, Step: st.Step, Visit: st.Visit, State: &Visit{State: st, Stale: stale}},
	}
}

func TestStepHandler(t *testing.T) {
	g := order(t, "")
	st, _ := g.Start("r1", json.RawMessage(`{"sku":"a"}`), t0)
	for _, tc := range []struct {
		name    string
		stale   bool
		result  engine.Result
		payload PayloadFunc
		calls   int
		label   string
		body    string
		dup     bool
		err     bool
	}{
		{name: "ack", result: engine.Result{Outcome: engine.Ack()}, calls: 1, label: "ack", body: `{"sku":"a"}`},
		{name: "drop", result: engine.Result{Outcome: engine.Drop()}, calls: 1, label: "drop", body: `{"sku":"a"}`},
		{name: "retry", result: engine.Result{Outcome: engine.Retry()}, calls: 1, body: `{"sku":"a"}`},
		{name: "ack with error", result: engine.Result{Outcome: engine.Ack(), Err: errors.New("x")}, calls: 1, body: `{"sku":"a"}`, err: true},
		{name: "dead letter", result: engine.Result{Outcome: engine.DeadLetter("400")}, calls: 1, body: `{"sku":"a"}`},
		{name: "stale", stale: true, result: engine.Result{Outcome: engine.Ack()}, dup: true},
		{name: "payload", result: engine.Result{Outcome: engine.Ack()}, calls: 1, label: "ack", body: `"a"`,
			payload: func(*engine.Delivery) ([]byte, error) { return []byte(`"a"`), nil }},
		{name: "payload error", result: engine.Result{Outcome: engine.Ack()}, err: true,
			payload: func(*engine.Delivery) ([]byte, error) { return nil, errors.New("bad") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &recordingHandler{result: tc.result}
			h := NewStepHandler(g, "reserve", in, tc.payload)
			d := stepDelivery(st, tc.stale)
			d.Run.State.(*Visit).Label = "junk"
			res := h.Handle(context.Background(), d)
			if in.calls != tc.calls || res.Duplicate != tc.dup || (res.Err != nil) != tc.err {
				t.Fatalf("calls %d duplicate %v err %v", in.calls, res.Duplicate, res.Err)
			}
			if got := d.Run.State.(*Visit).Label; got != tc.label {
				t.Errorf("label %q, want %q", got, tc.label)
			}
			if tc.dup && res.Outcome.Kind != engine.KindAck {
				t.Errorf("duplicate outcome %v", res.Outcome)
			}
			if in.calls == 0 {
				return
			}
			if string(in.got.Payload) != tc.body {
				t.Errorf("payload %s, want %s", in.got.Payload, tc.body)
			}
			hd := in.got.Headers
			if hd[engine.HeaderIdempotencyKey] != "order/r1/reserve/1" || hd[engine.HeaderRunID] != "r1" || hd["x-retry-count"] != "1" {
				t.Errorf("headers %v", hd)
			}
		})
	}
}

// A rule's fail is a dead letter with the rule's reason: the run fails through Graph.Fail.
func TestStepHandlerRuleFail(t *testing.T) {
	g := order(t, "")
	st, _ := g.Start("r1", nil, t0)
	d := stepDelivery(st, false)
	h := NewStepHandler(g, "reserve", engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
		d.Run.Fail = "declined"
		return engine.Result{Outcome: engine.Ack()}
	}), nil)
	res := h.Handle(context.Background(), d)
	if res.Outcome.Kind != engine.KindDeadLetter || res.Outcome.Reason != "declined" || d.Run.State.(*Visit).Label != "" {
		t.Fatalf("result %+v label %q", res, d.Run.State.(*Visit).Label)
	}
}

func TestStepHandlerInline(t *testing.T) {
	g := order(t, "")
	if _, ok := NewStepHandler(g, "reserve", &recordingHandler{}, nil).(engine.Inliner); ok {
		t.Error("a blocking handler's step handler is an Inliner")
	}
	h := NewStepHandler(g, "reserve", inlineRecording{&recordingHandler{}}, nil)
	if in, ok := h.(engine.Inliner); !ok || !in.Inline() {
		t.Error("an inline handler's step handler does not inline")
	}
	res := h.Handle(context.Background(), &engine.Delivery{})
	if res.Err == nil {
		t.Error("a delivery without a run ran")
	}
}

func TestStepHandlerKeepsCallerHeaders(t *testing.T) {
	g := order(t, "")
	st, _ := g.Start("r1", nil, t0)
	d := stepDelivery(st, false)
	orig := d.Headers
	NewStepHandler(g, "reserve", &recordingHandler{result: engine.Result{Outcome: engine.Ack()}}, nil).Handle(context.Background(), d)
	if _, ok := orig[engine.HeaderIdempotencyKey]; ok {
		t.Error("the step message's own header map was written")
	}
}
