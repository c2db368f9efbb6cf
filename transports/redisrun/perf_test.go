package redisrun

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/workflow"
)

// TestPerfRuns (FLOWRUN_PERF=1): runs per second and Redis CPU of three-step runs through the
// engine, and of a hand-written consumer doing the least Redis work per step (output, history,
// next message, ack; no visit check, run record or active counts). A measuring tool, skipped
// by default.
func TestPerfRuns(t *testing.T) {
	if os.Getenv("FLOWRUN_PERF") == "" {
		t.Skip("FLOWRUN_PERF not set")
	}
	e := newEnv(t)
	g := &workflow.Graph{Name: "order", Retention: time.Hour, Steps: []workflow.StepDef{
		{Name: "a", Next: "b"}, {Name: "b", Next: "c"}, {Name: "c"}}}
	e.s = NewStore(e.srv.Client(t), g)
	const runs = 5000
	var done atomic.Int64
	e.s.OnDone = func(workflow.Status, time.Duration) { done.Add(1) }
	for i := range runs {
		st, tr := g.Start(itoa(i), []byte(`{}`), time.Now())
		if _, err := e.s.Create(e.ctx, st, tr); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	var pipes []*engine.Pipeline
	for _, step := range []string{"a", "b", "c"} {
		inner := engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
			d.Run.Output, d.Run.HasOutput = 1, true
			return engine.Result{Outcome: engine.Ack()}
		})
		pipes = append(pipes, &engine.Pipeline{Name: "order/" + step,
			Source:  e.s.StepSource(step, StepOptions{Consumer: "p"}, zerolog.Nop()),
			Handler: workflow.NewStepHandler(g, step, inner, nil), Concurrency: 8,
			DeadLetter: e.s.DeadLetterKey(), Logger: zerolog.Nop()})
	}
	e.rdb.ConfigResetStat(e.ctx)
	cpu0 := redisCPU(t, e)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = engine.New(engine.Options{}, pipes...).Run(ctx) }()
	e.waitFor("runs", 120*time.Second, func() bool { return done.Load() == runs })
	took := time.Since(start)
	cancel()
	wg.Wait()
	t.Logf("flowrun: %d runs in %s: %.0f runs/s, redis cpu %s", runs, took, runs/took.Seconds(), redisCPU(t, e)-cpu0)

	if st, err := e.rdb.Info(e.ctx, "commandstats").Result(); err == nil {
		t.Log(st) // where flowrun's Redis time goes, per command
	}
	// Hand-written: per step, read a batch, one script per message (output, history, next, ack).
	e.rdb.FlushAll(e.ctx)
	script := redis.NewScript(`
redis.call('HSET', KEYS[2], ARGV[1], '1')
redis.call('RPUSH', KEYS[3], ARGV[3])
if KEYS[4] ~= KEYS[1] then redis.call('XADD', KEYS[4], '*', 'run', ARGV[2]) end
redis.call('HSET', KEYS[5], 'step', ARGV[1])
redis.call('XACK', KEYS[1], 'g', ARGV[4])
return 1`)
	c := e.srv.Client(t)
	steps := []string{"a", "b", "c"}
	for _, s := range steps {
		c.XGroupCreateMkStream(e.ctx, "h:"+s, "g", "0")
	}
	for i := range runs {
		c.XAdd(e.ctx, &redis.XAddArgs{Stream: "h:a", Values: []string{"run", itoa(i)}})
	}
	var fin atomic.Int64
	ctx, cancel = context.WithCancel(e.ctx)
	cpu0 = redisCPU(t, e)
	start = time.Now()
	for si, s := range steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := "h:" + s
			if si < 2 {
				next = "h:" + steps[si+1]
			}
			for ctx.Err() == nil {
				res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"h:" + s, ">"}, Count: 100, Block: 100 * time.Millisecond}).Result()
				if err != nil || len(res) == 0 {
					continue
				}
				p := c.Pipeline()
				for _, m := range res[0].Messages {
					id := m.Values["run"].(string)
					script.EvalSha(ctx, p, []string{"h:" + s, "h:out:" + id, "h:hist:" + id, next, "h:run:" + id}, s, id, `{"step":"x"}`, m.ID)
				}
				p.Exec(ctx)
				if si == 2 {
					fin.Add(int64(len(res[0].Messages)))
				}
			}
		}()
	}
	script.Load(e.ctx, c)
	e.waitFor("hand-written runs", 120*time.Second, func() bool { return fin.Load() == runs })
	took2 := time.Since(start)
	cancel()
	wg.Wait()
	t.Logf("hand-written: %d runs in %s: %.0f runs/s; flowrun/plain = %.2f, redis cpu %s", runs, took2, runs/took2.Seconds(), took2.Seconds()/took.Seconds(), redisCPU(t, e)-cpu0)
}

func redisCPU(t *testing.T, e *env) time.Duration {
	d, err := redistest.ServerCPU(e.ctx, e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
