package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// fanGraph: notify (for_each) -> done.
func fanGraph(t *testing.T) *Graph {
	t.Helper()
	g, err := NewGraph("mail", "", time.Hour, []StepDef{
		{Name: "notify", Next: "done", ForEach: true},
		{Name: "done"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func fanDelivery(st *State, headers map[string]string) *engine.Delivery {
	return &engine.Delivery{
		Message: engine.Message{Key: "flowrun:{mail}:s:notify", Headers: headers},
		Run:     &engine.Run{ID: st.ID, Workflow: st.Workflow, Step: st.Step, Visit: st.Visit, State: &Visit{State: st}},
	}
}

func constList(v any, err error) ListFunc {
	return func(*engine.Delivery) (any, error) { return v, err }
}

func TestForEachFanOut(t *testing.T) {
	g := fanGraph(t)
	st, _ := g.Start("r1", json.RawMessage(`{}`), t0)
	inner := &recordingHandler{result: engine.Result{Outcome: engine.Ack()}}
	for _, tc := range []struct {
		name  string
		list  ListFunc
		kind  engine.Kind
		items []string
		empty bool
		dead  string
		err   bool
	}{
		{name: "elements", list: constList([]any{"a", map[string]any{"b": 1.0}}, nil), kind: engine.KindAck, items: []string{`"a"`, `{"b":1}`}},
		{name: "empty", list: constList([]any{}, nil), kind: engine.KindAck, empty: true},
		{name: "too many", list: constList([]any{1.0, 2.0, 3.0, 4.0}, nil), kind: engine.KindDeadLetter, dead: "for_each gave 4 elements, more than max_items (3)"},
		{name: "not a list", list: constList(map[string]any{}, nil), kind: engine.KindDeadLetter, dead: "for_each gave a map, not a list"},
		{name: "nil", list: constList(nil, nil), kind: engine.KindDeadLetter, dead: "for_each gave nil, not a list"},
		{name: "eval error", list: constList(nil, errors.New("boom")), kind: engine.KindRetry, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := fanDelivery(st, map[string]string{"run": "r1", "visit": "1"})
			res := NewForEachHandler(g, "notify", inner, nil, tc.list, 3).Handle(context.Background(), d)
			v := d.Run.State.(*Visit)
			if res.Outcome.Kind != tc.kind || (res.Err != nil) != tc.err || res.Outcome.Reason != tc.dead {
				t.Fatalf("result %+v", res)
			}
			if inner.calls != 0 {
				t.Fatalf("the fan delivery called the handler")
			}
			switch {
			case tc.items != nil:
				if v.Fan == nil || v.Fan.Kind != FanOut || len(v.Fan.Items) != len(tc.items) || v.Label != "ack" {
					t.Fatalf("visit %+v fan %+v", v, v.Fan)
				}
				for i, it := range tc.items {
					if string(v.Fan.Items[i]) != it {
						t.Errorf("item %d = %s, want %s", i, v.Fan.Items[i], it)
					}
				}
			case tc.empty:
				if v.Fan == nil || len(v.Fan.Items) != 0 || !d.Run.HasOutput || v.Label != "ack" {
					t.Fatalf("visit %+v, run %+v", v, d.Run)
				}
				tr := g.Finish(st, d.Run, 1, v.Label, t0)
				if string(tr.Output) != "[]" || tr.Enter != "done" {
					t.Fatalf("empty list finish = %+v", tr)
				}
			default:
				if v.Label != "" {
					t.Fatalf("label %q", v.Label)
				}
			}
		})
	}
}

func TestForEachElement(t *testing.T) {
	g := fanGraph(t)
	st, _ := g.Start("r1", json.RawMessage(`{}`), t0)
	var gotItem any
	var gotIndex int
	var sawItem bool
	rec := &recordingHandler{result: engine.Result{Outcome: engine.Ack()}}
	inner := engine.HandlerFunc(func(ctx context.Context, d *engine.Delivery) engine.Result {
		_, sawItem = d.Headers[FieldItem]
		return rec.Handle(ctx, d)
	})
	payload := func(d *engine.Delivery) ([]byte, error) {
		gotItem, gotIndex = d.Run.Item, d.Run.Index
		return []byte(`"p"`), nil
	}
	d := fanDelivery(st, map[string]string{"run": "r1", "visit": "1", FieldIndex: "2", FieldItem: `{"to":"a"}`})
	res := NewForEachHandler(g, "notify", inner, payload, constList(nil, nil), 0).Handle(context.Background(), d)
	v := d.Run.State.(*Visit)
	if res.Outcome.Kind != engine.KindAck || v.Label != "ack" || v.Fan == nil || v.Fan.Kind != FanItem || v.Fan.Index != 2 {
		t.Fatalf("result %+v visit %+v", res, v)
	}
	if m, _ := gotItem.(map[string]any); m["to"] != "a" || gotIndex != 2 {
		t.Fatalf("payload saw item %v index %d", gotItem, gotIndex)
	}
	h := rec.got.Headers
	if h[engine.HeaderIdempotencyKey] != "mail/r1/notify/1/2" || h[engine.HeaderRunID] != "r1" || string(rec.got.Payload) != `"p"` {
		t.Fatalf("handler saw headers %v payload %s", h, rec.got.Payload)
	}
	if sawItem {
		t.Errorf("the handler saw the element as a header: %v", h)
	}
	if d.Headers[FieldItem] != `{"to":"a"}` || d.Headers[FieldIndex] != "2" {
		t.Errorf("the delivery lost its element for a retry: %v", d.Headers)
	}

	// A stale element runs nothing.
	rec.calls = 0
	d = fanDelivery(st, map[string]string{FieldIndex: "0", FieldItem: `1`})
	d.Run.State.(*Visit).Stale = true
	if res := NewForEachHandler(g, "notify", inner, nil, nil, 0).Handle(context.Background(), d); !res.Duplicate || rec.calls != 0 {
		t.Fatalf("stale element: %+v, %d calls", res, rec.calls)
	}
	// A bad index is a dead letter, not a call.
	d = fanDelivery(st, map[string]string{FieldIndex: "x"})
	if res := NewForEachHandler(g, "notify", inner, nil, nil, 0).Handle(context.Background(), d); res.Outcome.Kind != engine.KindDeadLetter || rec.calls != 0 {
		t.Fatalf("bad index: %+v", res)
	}
}

func TestForEachJoin(t *testing.T) {
	g := fanGraph(t)
	st, _ := g.Start("r1", json.RawMessage(`{}`), t0)
	d := fanDelivery(st, map[string]string{FieldJoin: "1"})
	inner := &recordingHandler{}
	res := NewForEachHandler(g, "notify", inner, nil, nil, 0).Handle(context.Background(), d)
	v := d.Run.State.(*Visit)
	if res.Outcome.Kind != engine.KindAck || v.Fan == nil || v.Fan.Kind != FanJoin || v.Label != "ack" || inner.calls != 0 {
		t.Fatalf("join: %+v %+v", res, v)
	}
	tr := g.Join(st, []json.RawMessage{json.RawMessage(`{"a":1}`), nil, json.RawMessage(`"c"`)}, 1, t0)
	if string(tr.Output) != `[{"a":1},null,"c"]` || !tr.HasOutput || tr.Enter != "done" || tr.Visit != 1 {
		t.Fatalf("join transition %+v output %s", tr, tr.Output)
	}
	if !st.Apply(tr) || st.Step != "done" || len(st.History) != 2 || st.History[1].Outcome != "ack" {
		t.Fatalf("after the join: %+v", st)
	}
	// A second join of the same visit is stale: the step finishes once.
	if st.Apply(g.Join(st, nil, 1, t0)) && st.Step != "" {
		t.Fatalf("a second join moved the run again: %+v", st)
	}
}

func TestElementOutput(t *testing.T) {
	if b, _ := ElementOutput(&engine.Run{}); string(b) != "null" {
		t.Fatalf("no output = %s", b)
	}
	if b, _ := ElementOutput(&engine.Run{Output: []int{1}, HasOutput: true}); string(b) != "[1]" {
		t.Fatalf("output = %s", b)
	}
	if _, err := ElementOutput(&engine.Run{Output: func() {}, HasOutput: true}); err == nil || !strings.Contains(err.Error(), "element output") {
		t.Fatalf("err = %v", err)
	}
}
