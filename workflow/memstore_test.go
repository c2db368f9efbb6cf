package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

func TestMemStore(t *testing.T) {
	ctx := context.Background()
	g := order(t, "")
	m := NewMemStore()
	st, tr := g.Start("r1", json.RawMessage(`1`), t0)
	if ok, err := m.Create(ctx, st, tr); !ok || err != nil {
		t.Fatalf("create: %v %v", ok, err)
	}
	if ok, _ := m.Create(ctx, st, tr); ok {
		t.Fatal("a second create of r1 succeeded")
	}
	st2, tr2 := g.Start("r2", nil, t0)
	if _, err := m.Create(ctx, st2, tr2); err != nil {
		t.Fatal(err)
	}
	got, err := m.Get(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	fin := g.Finish(got, &engine.Run{Output: "x", HasOutput: true}, 1, "ack", t0)
	if ok, err := m.Apply(ctx, fin); !ok || err != nil {
		t.Fatalf("apply: %v %v", ok, err)
	}
	if ok, _ := m.Apply(ctx, fin); ok {
		t.Fatal("a stale transition applied")
	}
	if _, err := m.Apply(ctx, Transition{Run: "none"}); !errors.Is(err, ErrNoRun) {
		t.Fatalf("apply to no run: %v", err)
	}
	if string(got.Steps["reserve"]) != "" {
		t.Fatal("the caller's copy changed")
	}
	after, _ := m.Get(ctx, "r1")
	if after.Step != "charge" || after.Visit != 2 || string(after.Steps["reserve"]) != `"x"` {
		t.Fatalf("after: %+v", after)
	}
	es := m.Entered()
	if len(es) != 3 || es[0].Step != "reserve" || es[1].Run != "r2" || es[2].Step != "charge" || es[2].Visit != 2 {
		t.Fatalf("entered %+v", es)
	}
	if len(m.Entered()) != 0 {
		t.Fatal("Entered did not forget")
	}
	l, _ := m.List(ctx, "", 0)
	if len(l) != 2 || l[0].ID != "r2" {
		t.Fatalf("list %v", l)
	}
	if l, _ := m.List(ctx, Running, 1); len(l) != 1 {
		t.Fatalf("list limit %d", len(l))
	}
	if l, _ := m.List(ctx, Completed, 0); len(l) != 0 {
		t.Fatalf("list completed %d", len(l))
	}
	if _, err := m.Get(ctx, "none"); !errors.Is(err, ErrNoRun) {
		t.Fatal(err)
	}
}
