package redisrun

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flowrun/flowrun/workflow"
)

// Concurrent start handlers' creations share round trips; each still gets its own answer: a
// new run true, an id that exists false, and every run is written once with one first step
// message.
func TestSharedCreatesAnswerEachCaller(t *testing.T) {
	e := newEnv(t)
	now := time.UnixMilli(1_700_000_000_000)
	e.create("r0", now) // exists before: its creation below is a duplicate
	const n = 200
	got := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("r%d", i%150) // ids 0..49 asked twice
			st := &workflow.State{ID: id, Workflow: "order", Status: workflow.Running, Step: "reserve", Visit: 1,
				Input: []byte(`{}`), StartedAt: now, UpdatedAt: now}
			got[i], errs[i] = e.s.Create(e.ctx, st, workflow.Transition{Visit: 0, Status: workflow.Running, Enter: "reserve", At: now})
		}()
	}
	wg.Wait()
	created := map[string]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		if got[i] {
			created[fmt.Sprintf("r%d", i%150)]++
		}
	}
	if _, ok := created["r0"]; ok {
		t.Error("r0 existed before: its creations must answer false")
	}
	for i := 1; i < 150; i++ {
		if c := created[fmt.Sprintf("r%d", i)]; c != 1 {
			t.Errorf("r%d created %d times, want once", i, c)
		}
	}
	if xs := e.xrange(e.k.step("reserve")); len(xs) != 150 {
		t.Errorf("reserve stream has %d messages, want 150 (one per run)", len(xs))
	}
	if a := e.hgetall(e.k.active()); a["reserve"] != "150" {
		t.Errorf("active = %v, want reserve 150", a)
	}
}
