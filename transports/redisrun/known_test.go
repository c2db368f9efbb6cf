package redisrun

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// pureGraph: a -> b -> c, three steps of rules alone.
func pureGraph() *workflow.Graph {
	return &workflow.Graph{Name: "order", Retention: time.Hour, Steps: []workflow.StepDef{
		{Name: "a", Next: "b"}, {Name: "b", Next: "c"}, {Name: "c"}}}
}

// runPure runs steps of pureGraph in an engine until the returned stop: each step records its
// name as its output and hands seen what its delivery saw of the run.
func runPure(ctx context.Context, t *testing.T, s *Store, o StepOptions, seen func(step string, d *engine.Delivery), steps ...string) func() {
	var pipes []*engine.Pipeline
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	for _, step := range steps {
		inner := engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
			seen(step, d)
			d.Run.Output, d.Run.HasOutput = step, true
			return engine.Result{Outcome: engine.Ack()}
		})
		o.Block = 50 * time.Millisecond
		pipes = append(pipes, &engine.Pipeline{Name: "order/" + step, Source: s.StepSource(step, o, log),
			Handler: workflow.NewStepHandler(s.g, step, inner, nil), Concurrency: 4,
			DeadLetter: s.DeadLetterKey(), Logger: log})
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = engine.New(engine.Options{}, pipes...).Run(ctx) }()
	return func() { cancel(); wg.Wait() }
}

// hgetalls is how many HGETALL Redis has served since its stats were reset.
func (e *env) hgetalls() int {
	e.t.Helper()
	info, err := e.rdb.Info(e.ctx, "commandstats").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_hgetall:calls=")
	if !ok {
		return 0
	}
	var n int
	fmt.Sscanf(rest, "%d", &n)
	return n
}

// Pure steps start each visit this process entered from the run as its transition left it: no
// run is loaded, and every step still sees the run's input and the outputs of the steps before
// it, and completes its run exactly as a loaded one does. A step that is not pure loads each
// run. (One step runs at a time: a step's reader may see the next message before the
// transition's reply says what the run became, and then loads it.)
func TestPureStepsStartFromKnownRuns(t *testing.T) {
	for _, pure := range []bool{true, false} {
		t.Run(fmt.Sprint("pure=", pure), func(t *testing.T) {
			e := newEnv(t)
			e.s = NewStore(e.srv.Client(t), pureGraph())
			const runs = 40
			var done atomic.Int64
			e.s.OnDone = func(workflow.Status, time.Duration) { done.Add(1) }
			var bad sync.Map
			seen := func(step string, d *engine.Delivery) {
				want := map[string]string{"a": "map[]", "b": "map[a:a]", "c": "map[a:a b:b]"}[step]
				if got := fmt.Sprint(d.Run.Steps); got != want || fmt.Sprint(d.Run.Input) != "map[n:7]" {
					bad.Store(step+"/"+d.Run.ID, fmt.Sprint(got, " input ", d.Run.Input))
				}
			}
			o := StepOptions{Consumer: "p", Pure: pure}
			for _, step := range []string{"a", "b", "c"} {
				e.s.StepSource(step, o, zerolog.Nop()) // every step pure before the first creation
			}
			if err := e.rdb.ConfigResetStat(e.ctx).Err(); err != nil {
				t.Fatal(err)
			}
			for range runs {
				if _, err := e.s.Begin(e.ctx, []byte(`{"n":7}`), "fp"); err != nil {
					t.Fatal(err)
				}
			}
			for i, step := range []string{"a", "b", "c"} {
				stop := runPure(e.ctx, t, e.s, o, seen, step)
				e.waitFor("every run to finish "+step, 10*time.Second, func() bool {
					if i == 2 {
						return done.Load() == runs
					}
					n, err := e.rdb.XLen(e.ctx, e.k.step(pureGraph().Steps[i+1].Name)).Result()
					return err == nil && n == runs
				})
				stop()
			}
			loads := e.hgetalls()
			bad.Range(func(k, v any) bool { t.Errorf("%s saw outputs %v", k, v); return true })
			if pure && loads != 0 {
				t.Errorf("pure steps loaded runs %d times, want none", loads)
			}
			if !pure && loads < 3*runs {
				t.Errorf("steps loaded runs %d times, want at least %d", loads, 3*runs)
			}
			l, err := e.s.List(e.ctx, "", 0)
			if err != nil || len(l) != runs {
				t.Fatalf("List = %d runs, %v", len(l), err)
			}
			for _, r := range l {
				st, err := e.s.Get(e.ctx, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if st.Status != workflow.Completed || st.Visit != 3 || fmt.Sprint(st.Path()) != "[a b c]" {
					t.Errorf("run %s: %s at visit %d, path %v", r.ID, st.Status, st.Visit, st.Path())
				}
			}
		})
	}
}

// A run cancelled after this process entered its pure step is not moved on by the visit that
// starts from what the process knew: the transition is refused as it applies (the run stays
// cancelled, its history as the cancel left it, no next step's message), and the step's
// message is acknowledged.
func TestPureStepOfCancelledRunChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.s = NewStore(e.srv.Client(t), pureGraph())
	var ran atomic.Int64
	e.s.StepSource("a", StepOptions{Consumer: "p", Pure: true}, zerolog.Nop()) // makes "a" pure
	id, err := e.s.Begin(e.ctx, []byte(`{}`), "fp")
	if err != nil {
		t.Fatal(err)
	}
	if e.s.known.cur.runs[id] == nil {
		t.Fatalf("the new run at a pure step is not known")
	}
	if err := e.s.Cancel(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	before, err := e.s.Get(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	stop := runPure(e.ctx, t, e.s, StepOptions{Consumer: "p", Pure: true}, func(string, *engine.Delivery) { ran.Add(1) }, "a", "b", "c")
	defer stop()
	e.waitFor("the step message to be acknowledged", 5*time.Second, func() bool {
		p, err := e.rdb.XPending(e.ctx, e.k.step("a"), "order").Result()
		return err == nil && p.Count == 0 && len(e.xrange(e.k.step("a"))) == 1 && ran.Load() == 1
	})
	stop()
	after, err := e.s.Get(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != workflow.Cancelled || after.Visit != before.Visit || len(after.History) != len(before.History) || len(after.Steps) != 0 {
		t.Errorf("cancelled run moved: %s visit %d history %v steps %v", after.Status, after.Visit, after.History, after.Steps)
	}
	if n := len(e.xrange(e.k.step("b"))); n != 0 {
		t.Errorf("%d messages entered b", n)
	}
}

// knownRuns keeps a run for the visit it is at and gives it out once, in two generations: a
// new one begins when the current one holds half of knownBytes or is knownAge old, and the one
// before it is dropped.
func TestKnownRunsTakeOnceAndAgeOut(t *testing.T) {
	var k knownRuns
	k.allow("b")
	k.put(&workflow.State{ID: "r1", Step: "a", Visit: 1}) // not a pure step: not kept
	k.put(&workflow.State{ID: "r2", Step: "b", Visit: 2})
	k.put(&workflow.State{ID: "r3", Step: "b", Visit: 2})
	if k.take("r1", 1) != nil {
		t.Error("a run at a step that is not pure was kept")
	}
	if k.take("r2", 3) != nil || k.take("r2", 2) != nil {
		t.Error("r2 was given for another visit, or kept after it")
	}
	if st := k.take("r3", 2); st == nil || k.take("r3", 2) != nil {
		t.Error("r3 was not given once")
	}

	half := knownBytes / 2 / knownSize(&workflow.State{}) // runs of this size in a generation
	for i := range 2*half + 1 {
		k.put(&workflow.State{ID: fmt.Sprint(i), Step: "b", Visit: 2})
	}
	if k.take("0", 2) != nil {
		t.Error("a run outlived two generations of knownBytes")
	}
	if k.take(fmt.Sprint(half+1), 2) == nil || k.take(fmt.Sprint(2*half), 2) == nil {
		t.Error("a run of the older generation, or of the newest, was dropped")
	}
	if k.cur.bytes+k.old.bytes > knownBytes {
		t.Errorf("holds %d bytes, over %d", k.cur.bytes+k.old.bytes, knownBytes)
	}
	k.since = k.since.Add(-knownAge) // a generation later
	k.put(&workflow.State{ID: "new", Step: "b", Visit: 2})
	k.since = k.since.Add(-knownAge) // and another
	k.put(&workflow.State{ID: "newer", Step: "b", Visit: 2})
	if k.take(fmt.Sprint(2*half-1), 2) != nil || k.take("new", 2) == nil || k.take("newer", 2) == nil {
		t.Error("a run outlived two generations of knownAge, or a newer one was dropped")
	}
}

// A pure step's delivery that was delivered before (this consumer's own pending, read again
// after a restart) is loaded, not started from what the process knows: only a first delivery is
// sure to be the message the known transition wrote.
func TestPureStepRedeliveryLoads(t *testing.T) {
	e := newEnv(t)
	e.s = NewStore(e.srv.Client(t), pureGraph())
	o := StepOptions{Consumer: "p", Pure: true}
	e.s.StepSource("a", o, zerolog.Nop()) // makes "a" pure
	id, err := e.s.Begin(e.ctx, []byte(`{"n":7}`), "fp")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.XGroupCreateMkStream(e.ctx, e.k.step("a"), "order", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// Delivered to p once, as by a process that died before settling it.
	if err := e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "order", Consumer: "p",
		Streams: []string{e.k.step("a"), ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.ConfigResetStat(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var steps atomic.Value
	stop := runPure(e.ctx, t, e.s, o, func(_ string, d *engine.Delivery) { steps.Store(fmt.Sprint(d.Run.Steps)) }, "a")
	defer stop()
	e.waitFor("the redelivery to enter b", 5*time.Second, func() bool {
		n, err := e.rdb.XLen(e.ctx, e.k.step("b")).Result()
		return err == nil && n == 1
	})
	loads := e.hgetalls()
	stop()
	if loads == 0 {
		t.Error("a redelivered message started from the known run, unloaded")
	}
	if got := steps.Load(); got != "map[]" {
		t.Errorf("the visit saw outputs %v, want none", got)
	}
	if e.s.known.cur.runs[id] == nil {
		t.Error("the known run was taken by a redelivery")
	}
}
