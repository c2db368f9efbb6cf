package redisstream

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

// settleCounter counts what its source settled, so the benchmark knows when it is done.
type settleCounter struct {
	*Source
	n    atomic.Int64
	want int64
	done chan struct{}

	calls, pushes atomic.Int64
}

func (c *settleCounter) Settle(ctx context.Context, batch []engine.Settlement) error {
	err := c.Source.Settle(ctx, batch)
	if n := int64(len(batch)); n > 0 && c.n.Add(n) >= c.want && c.n.Load()-n < c.want {
		close(c.done) // once: the batch that reached want (a batch sent again goes past it)
	}
	c.calls.Add(1)
	return err
}

// Receive counts the source's pushes.
func (c *settleCounter) Receive(ctx context.Context, feed engine.Feed) error {
	return c.Source.Receive(ctx, countFeed{feed, &c.pushes})
}

type countFeed struct {
	engine.Feed
	n *atomic.Int64
}

func (f countFeed) Push(ctx context.Context, ds []*engine.Delivery) bool {
	f.n.Add(1)
	return f.Feed.Push(ctx, ds)
}

// BenchmarkEngineDrain drains a preloaded stream through the engine, as the bench's noop row
// (every entry acknowledged) and, for retry, with every tenth first attempt retried (a copy
// XADDed, then the original XACKed) as its rules row does. cpu-ns/op is this process's CPU
// time per delivery (the engine and the source; Redis is another process), steadier than ns/op
// on a shared machine:
//
//	go test -run '^$' -bench EngineDrain -count 5 ./transports/redisstream/
func BenchmarkEngineDrain(b *testing.B) {
	for _, retry := range []bool{false, true} {
		name := "ack"
		if retry {
			name = "retry"
		}
		b.Run(name, func(b *testing.B) { engineDrain(b, retry) })
	}
}

func engineDrain(b *testing.B, retry bool) {
	_, c := redistest.Fresh(b)
	ctx := context.Background()
	entries := b.N
	if retry {
		entries = b.N * 10 / 11 // each tenth comes back once: b.N deliveries in all
	}
	for i := 0; i < entries; i += 1000 {
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+1000, entries); j++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: "bench", Values: []string{"payload",
					`{"id":` + strconv.Itoa(j) + `,"amount":12.5,"currency":"EUR","customer":"c-` + strconv.Itoa(j%97) + `"}`}})
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	if entries == 0 {
		return
	}
	src, err := New(c, Options{Kind: KindStream, Stream: "bench", Group: "g", Consumer: "b", Batch: 1000}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	retries := 0
	if retry {
		retries = entries / 10
	}
	counter := &settleCounter{Source: src, want: int64(entries + retries), done: make(chan struct{})}
	var seen atomic.Int64
	p := &engine.Pipeline{Name: "bench", Source: counter, Logger: zerolog.Nop(),
		Handler: engine.HandlerFunc(func(_ context.Context, d *engine.Delivery) engine.Result {
			if retry && d.Attempt == 1 && seen.Add(1)%10 == 0 {
				return engine.Result{Outcome: engine.Retry()}
			}
			return engine.Result{Outcome: engine.Ack()}
		})}
	cpu := transporttest.DrainCPU(b, ctx, p, counter.done, counter.n.Load)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(counter.want), "cpu-ns/op")
	b.ReportMetric(float64(counter.want)/float64(counter.calls.Load()), "settled/call")
	b.ReportMetric(float64(counter.want)/float64(counter.pushes.Load()), "read/push")
}
