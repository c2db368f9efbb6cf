package redisrun

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// TestPerfWaitingRuns (FLOWRUN_PERF=1): the Redis memory of 100,000 runs waiting at a wait
// step (SPEC §16: waiting runs cost Redis memory only), each having finished one step before it:
// INFO memory used_memory after they all wait, less before, per run; with the step streams'
// settled entries, then after hygiene trimmed them. A measuring tool, skipped by default; docs/
// workflows.md quotes it.
func TestPerfWaitingRuns(t *testing.T) {
	if os.Getenv("FLOWRUN_PERF") == "" {
		t.Skip("FLOWRUN_PERF not set")
	}
	runs := 100_000
	if n, err := strconv.Atoi(os.Getenv("FLOWRUN_PERF_RUNS")); err == nil && n > 0 {
		runs = n
	}
	e := newEnv(t)
	g, err := workflow.NewGraph("order", "compensate", 7*24*time.Hour, []workflow.StepDef{
		{Name: "reserve", Next: "pay"},
		{Name: "pay", Next: "ship", Timeout: 24 * time.Hour, Wait: true, KeepFor: 24 * time.Hour},
		{Name: "ship"},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.s = NewStore(e.srv.Client(t), g)
	used0 := usedMemory(t, e)
	for i := range runs {
		id := "o-" + itoa(100000+i)
		st, tr := g.Start(id, []byte(`{"order_id":"`+id+`","sku":"tea","qty":2,"amount":12}`), time.Now())
		if _, err := e.s.Create(e.ctx, st, tr); err != nil {
			t.Fatal(err)
		}
	}
	reserve := engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
		d.Run.Output, d.Run.HasOutput = map[string]any{"reservation": "r-" + d.Run.ID}, true
		return engine.Result{Outcome: engine.Ack()}
	})
	ctx, cancel := context.WithCancel(e.ctx)
	pipes := []*engine.Pipeline{
		{Name: "order/reserve", Source: e.s.StepSource("reserve", StepOptions{Consumer: "p"}, zerolog.Nop()),
			Handler: workflow.NewStepHandler(g, "reserve", reserve, nil), Concurrency: 8, DeadLetter: e.s.DeadLetterKey(), Logger: zerolog.Nop()},
		{Name: "order/pay", Source: e.s.StepSource("pay", StepOptions{Consumer: "p"}, zerolog.Nop()),
			Handler: e.s.WaitHandler(), Concurrency: 16, DeadLetter: e.s.DeadLetterKey(), Logger: zerolog.Nop()},
	}
	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = engine.New(engine.Options{}, pipes...).Run(ctx) }()
	var waiting atomic.Int64
	e.waitFor("every run waiting", 10*time.Minute, func() bool {
		a, _ := e.s.Active(e.ctx)
		waiting.Store(a["pay"])
		return a["pay"] == int64(runs) && e.pending("pay") == 0 && e.pending("reserve") == 0
	})
	took := time.Since(start)
	cancel()
	wg.Wait()
	if h := e.hgetall(e.k.run("o-100000")); h["status"] != "waiting" {
		t.Fatalf("run = %v", h)
	}
	used1 := usedMemory(t, e)
	if err := e.s.hygiene(e.ctx); err != nil {
		t.Fatal(err)
	}
	used2 := usedMemory(t, e)
	t.Logf("%d runs waiting after %s; redis used_memory +%d bytes: %.0f bytes a run; after hygiene trimmed the step streams: %.0f bytes a run",
		runs, took.Round(time.Second), used1-used0, float64(used1-used0)/float64(runs), float64(used2-used0)/float64(runs))
}

func usedMemory(t *testing.T, e *env) int64 {
	t.Helper()
	info, err := e.rdb.Info(e.ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}
