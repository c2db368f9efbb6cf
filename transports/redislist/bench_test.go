package redislist

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

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
}

func (c *settleCounter) Settle(ctx context.Context, batch []engine.Settlement) error {
	err := c.Source.Settle(ctx, batch)
	if n := int64(len(batch)); n > 0 && c.n.Add(n) >= c.want && c.n.Load()-n < c.want {
		close(c.done) // once: the batch that reached want (a batch sent again goes past it)
	}
	return err
}

// BenchmarkReliableAck drains a preloaded reliable list through the engine with a handler that
// acknowledges, as the bench's list row does: cpu-ns/op is this process's CPU time per element
// (the engine and the source; Redis is another process), steadier than ns/op on a shared machine.
func BenchmarkReliableAck(b *testing.B) {
	_, c := redistest.Fresh(b)
	ctx := context.Background()
	for i := 0; i < b.N; i += 1000 {
		vals := make([]any, 0, 1000)
		for j := i; j < min(i+1000, b.N); j++ {
			vals = append(vals, `{"id":`+strconv.Itoa(j)+`,"amount":12.5,"currency":"EUR","customer":"c-`+strconv.Itoa(j%97)+`"}`)
		}
		if err := c.LPush(ctx, "bench", vals...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	src, err := New(c, Options{Key: "bench", Reliable: true, Consumer: "b", Batch: 1000}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	counter := &settleCounter{Source: src, want: int64(b.N), done: make(chan struct{})}
	p := &engine.Pipeline{Name: "bench", Source: counter, Logger: zerolog.Nop(),
		Handler: engine.HandlerFunc(func(context.Context, *engine.Delivery) engine.Result {
			return engine.Result{Outcome: engine.Ack()}
		})}
	cpu := transporttest.DrainCPU(b, ctx, p, counter.done, counter.n.Load)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}
