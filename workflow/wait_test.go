package workflow

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

func waitGraph(t *testing.T) *Graph {
	t.Helper()
	g, err := NewGraph("wf", "compensate", time.Hour, []StepDef{
		{Name: "pay", Next: "ship", Timeout: time.Minute, OnTimeout: "expire", Wait: true},
		{Name: "ship"},
		{Name: "expire"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestParkThenArriveRunsOn(t *testing.T) {
	g := waitGraph(t)
	m := NewMemStore()
	ctx := context.Background()
	now := time.Now()
	st, tr := g.Start("r", json.RawMessage(`{}`), now)
	if _, err := m.Create(ctx, st, tr); err != nil {
		t.Fatal(err)
	}
	st, _ = m.Get(ctx, "r")
	if ok, _ := m.Apply(ctx, g.Park(st, now)); !ok {
		t.Fatal("park not applied")
	}
	st, _ = m.Get(ctx, "r")
	if !st.WaitingAt("pay") || st.Visit != 1 || len(st.History) != 1 {
		t.Fatalf("parked = %+v", st)
	}
	if tr := g.Park(st, now); tr.Visit != NoVisit {
		t.Errorf("a waiting run parked again")
	}
	if ok, _ := m.Apply(ctx, g.Arrive(st, PayloadJSON([]byte(`{"ok":true}`)), 1, now)); !ok {
		t.Fatal("arrive not applied")
	}
	st, _ = m.Get(ctx, "r")
	if st.Status != Running || st.Step != "ship" || string(st.Steps["pay"]) != `{"ok":true}` {
		t.Errorf("after the event = %+v", st)
	}
}

func TestWaitingRunTimesOutRunning(t *testing.T) {
	g := waitGraph(t)
	now := time.Now()
	st, _ := g.Start("r", nil, now)
	st.Apply(g.Park(st, now))
	if !st.Apply(g.TimedOut(st, now)) || st.Status != Running || st.Step != "expire" {
		t.Errorf("after the timeout = %+v", st)
	}
}

func TestPayloadJSONOfText(t *testing.T) {
	if got := string(PayloadJSON([]byte("hello"))); got != `"hello"` {
		t.Errorf("PayloadJSON(hello) = %s", got)
	}
}
