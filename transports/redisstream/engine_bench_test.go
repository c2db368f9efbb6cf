package redisstream

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// takeoverMinIdle is min_idle of BenchmarkEngineTakeover, as in the bench's claim workload.
const takeoverMinIdle = time.Second

// BenchmarkEngineTakeover takes over b.N entries a dead consumer left pending, idle for
// min_idle, through the engine with every delivery acknowledged (the bench's claim-takeover and
// reclaim-takeover rows; -fresh: a backlog never read, the claim-fresh and reclaim-fresh rows),
// and with the bench's hand-written loop (XAUTOCLAIM COUNT 1000, one XACK
// of each batch) for the ratio. cpu-ns/op is this process's CPU time per entry, steadier than the
// bench on a shared machine; each run waits min_idle first:
//
//	go test -run '^$' -bench EngineTakeover -benchtime 200000x -count 3 ./transports/redisstream/
func BenchmarkEngineTakeover(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		c := takeoverBacklog(b, true)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := transporttest.CPUTime()
		args := &redis.XAutoClaimArgs{Stream: "bench", Group: "g", Consumer: "plain", MinIdle: takeoverMinIdle, Start: "0-0", Count: 1000}
		for done := 0; done < b.N; {
			msgs, next, err := c.XAutoClaim(ctx, args).Result()
			if err != nil {
				b.Fatal(err)
			}
			args.Start = next
			ids := make([]string, len(msgs))
			for i, m := range msgs {
				ids[i] = m.ID
			}
			if len(ids) > 0 {
				if err := c.XAck(ctx, "bench", "g", ids...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			done += len(ids)
		}
		cpu := transporttest.CPUTime() - cpu0
		b.StopTimer()
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	for _, kind := range []string{KindClaiming, KindReclaim, KindClaiming + "-fresh", KindReclaim + "-fresh"} {
		b.Run(kind, func(b *testing.B) {
			kind, fresh := strings.CutSuffix(kind, "-fresh")
			c := takeoverBacklog(b, !fresh)
			src, err := New(c, Options{Kind: kind, Stream: "bench", Group: "g", Consumer: "b", Batch: 1000, MinIdle: takeoverMinIdle}, zerolog.Nop())
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			counter := &settleCounter{Source: src, want: int64(b.N), done: make(chan struct{})}
			p := &engine.Pipeline{Name: "bench", Source: counter, Logger: zerolog.Nop(),
				Handler: engine.HandlerFunc(func(context.Context, *engine.Delivery) engine.Result {
					return engine.Result{Outcome: engine.Ack()}
				})}
			cpu := transporttest.DrainCPU(b, context.Background(), p, counter.done, counter.n.Load)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(counter.want), "cpu-ns/op")
			b.ReportMetric(float64(counter.want)/float64(counter.calls.Load()), "settled/call")
			b.ReportMetric(float64(counter.want)/float64(counter.pushes.Load()), "read/push")
		})
	}
}

// takeoverBacklog preloads b.N entries on stream "bench" with group "g"; with dead, consumer
// "dead" has read them and never acknowledged them, and it waits until they are idle for
// takeoverMinIdle. Redis writes
// and reads them in scripts, so that this process's profile is the takeover's alone.
func takeoverBacklog(b *testing.B, dead bool) *redis.Client {
	_, c := redistest.Fresh(b)
	ctx := context.Background()
	for i := 0; i < b.N; i += 10_000 {
		if err := deadBacklogScript.Run(ctx, c, []string{"bench"}, i, min(i+10_000, b.N), dead).Err(); err != nil && !isNil(err) {
			b.Fatal(err)
		}
	}
	if dead {
		time.Sleep(takeoverMinIdle + 100*time.Millisecond)
	}
	return c
}

// deadBacklogScript adds entries ARGV[1] to ARGV[2] (exclusive) to KEYS[1], with group g
// created at the first, and with ARGV[3] = 1 has consumer dead read them.
var deadBacklogScript = redis.NewScript(`
for j = tonumber(ARGV[1]), tonumber(ARGV[2]) - 1 do
  redis.call('XADD', KEYS[1], '*', 'payload',
    '{"id":' .. j .. ',"amount":12.5,"currency":"EUR","customer":"c-' .. (j % 97) .. '"}')
end
if tonumber(ARGV[1]) == 0 then redis.call('XGROUP', 'CREATE', KEYS[1], 'g', '0') end
if ARGV[3] == '1' then
  redis.call('XREADGROUP', 'GROUP', 'g', 'dead', 'COUNT', tonumber(ARGV[2]) - tonumber(ARGV[1]), 'STREAMS', KEYS[1], '>')
end
return 0
`)
