package redisrun

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// Runs driven by the engine itself, in two "processes" (an engine each, consumers of their
// own) sharing the workflow: every run completes, each step finishing once per visit.
func TestEngineRunsWorkflowInTwoProcesses(t *testing.T) {
	e := newEnv(t)
	const runs = 60
	var calls sync.Map // idempotency key -> calls
	var done atomic.Int64
	e.s.OnDone = func(st workflow.Status, _ time.Duration) {
		if st == workflow.Completed {
			done.Add(1)
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for _, consumer := range []string{"p1", "p2"} {
		s := NewStore(e.srv.Client(t), e.s.g)
		s.OnDone = e.s.OnDone
		var pipes []*engine.Pipeline
		for _, step := range []string{"reserve", "charge"} {
			inner := engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
				n, _ := calls.LoadOrStore(d.Headers[engine.HeaderIdempotencyKey], new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				d.Run.Output, d.Run.HasOutput = step+" of "+d.Run.ID, true
				return engine.Result{Outcome: engine.Ack()}
			})
			log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
			pipes = append(pipes, &engine.Pipeline{
				Name:    "order/" + step,
				Source:  s.StepSource(step, StepOptions{Consumer: consumer, Block: 50 * time.Millisecond}, log),
				Handler: workflow.NewStepHandler(s.g, step, inner, nil), Concurrency: 4,
				MaxAttempts: 3, DeadLetter: s.DeadLetterKey(), Logger: log,
			})
		}
		eng := engine.New(engine.Options{}, pipes...)
		wg.Add(2)
		go func() { defer wg.Done(); _ = eng.Run(ctx) }()
		go func() { defer wg.Done(); _ = s.RunTimers(ctx, zerolog.Nop()) }()
	}
	for i := range runs {
		if _, err := e.s.Begin(e.ctx, []byte(fmt.Sprintf(`{"n":%d}`, i)), "fp"); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("every run to complete", 10*time.Second, func() bool { return done.Load() == runs })
	cancel()
	wg.Wait()
	l, err := e.s.List(e.ctx, "", 0)
	if err != nil || len(l) != runs {
		t.Fatalf("List = %d runs, %v", len(l), err)
	}
	for _, r := range l {
		st, err := e.s.Get(e.ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range st.History {
			got = append(got, ev.Step+":"+ev.Outcome)
		}
		if st.Status != workflow.Completed || fmt.Sprint(got) != "[:started reserve:ack charge:ack charge:completed]" ||
			string(st.Steps["charge"]) != `"charge of `+r.ID+`"` {
			t.Errorf("run %s: %s, history %v, steps %v", r.ID, st.Status, got, st.Steps)
		}
	}
	n := 0
	calls.Range(func(k, v any) bool {
		n++
		if c := v.(*atomic.Int64).Load(); c != 1 {
			t.Errorf("%s called %d times", k, c)
		}
		return true
	})
	if n != 2*runs {
		t.Errorf("%d visits ran, want %d", n, 2*runs)
	}
	if a, _ := e.s.Active(e.ctx); len(a) != 0 {
		t.Errorf("active after all completed = %v", a)
	}
}
