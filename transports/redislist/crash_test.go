package redislist

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

const helperEnv = "REDISLIST_CRASH_HELPER_ADDR"

// crashPipeline consumes "crash" as worker w1, recording every handled payload in the set "seen".
func crashPipeline(t testing.TB, c redis.UniversalClient, pause time.Duration) *engine.Pipeline {
	src, err := New(c, Options{Key: "crash", Reliable: true, Consumer: "w1", Batch: 20, Block: 100 * time.Millisecond}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return &engine.Pipeline{Name: "crash", Source: src, Concurrency: 4, Logger: zerolog.Nop(),
		Handler: engine.HandlerFunc(func(ctx context.Context, d *engine.Delivery) engine.Result {
			if err := c.SAdd(ctx, "seen", d.Payload).Err(); err != nil {
				return engine.Result{Err: err}
			}
			time.Sleep(pause)
			return engine.Result{Outcome: engine.Ack()}
		})}
}

// TestCrashHelper is the consumer process that TestKillMidBacklog kills; it does nothing unless
// started by that test.
func TestCrashHelper(t *testing.T) {
	addr := os.Getenv(helperEnv)
	if addr == "" {
		t.Skip("helper process only")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	engine.New(engine.Options{}, crashPipeline(t, c, 2*time.Millisecond)).Run(context.Background())
}

// TestKillMidBacklog: a consumer is killed with SIGKILL mid-backlog; a restart with the same
// consumer name handles every element at least once and leaves both lists empty.
func TestKillMidBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a subprocess")
	}
	srv, c := redistest.Fresh(t)
	ctx := context.Background()
	const total = 1000
	vals := make([]any, total)
	for i := range vals {
		vals[i] = fmt.Sprintf("job-%04d", i)
	}
	if err := c.LPush(ctx, "crash", vals...).Err(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.Addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	transporttest.WaitFor(t, "the helper to handle some", func() bool { return c.SCard(ctx, "seen").Val() >= 100 })
	cmd.Process.Kill()
	cmd.Wait()
	if n := llen(t, c, "crash:processing:w1"); n == 0 {
		t.Fatal("nothing in the processing list after the kill: the test did not catch work in flight")
	}
	if n := c.SCard(ctx, "seen").Val(); n >= total {
		t.Fatalf("the helper handled all %d before the kill", n)
	}

	stop := transporttest.RunPipeline(t, crashPipeline(t, c, 0))
	transporttest.WaitFor(t, "every element handled and both lists empty", func() bool {
		return c.SCard(ctx, "seen").Val() == total && llen(t, c, "crash") == 0 && llen(t, c, "crash:processing:w1") == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, v := range vals {
		if !c.SIsMember(ctx, "seen", v).Val() {
			t.Fatalf("%s never handled", v)
		}
	}
}
