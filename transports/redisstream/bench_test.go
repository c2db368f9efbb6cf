package redisstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

// benchEntries is the preloaded backlog each iteration drains.
const benchEntries = 50_000

// BenchmarkDrain compares draining a preloaded stream through Source.Receive + Settle(ActAck)
// with a plain go-redis loop (XREADGROUP COUNT 1000 + one XACK per batch), on one
// redis-server, reporting msgs/s for each:
//
//	go test -run '^$' -bench Drain -benchtime 3x ./transports/redisstream/
func BenchmarkDrain(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	b.Run("plain-go-redis", func(b *testing.B) {
		drain(b, rdb, func(ctx context.Context, stream string) func() {
			for left := benchEntries; left > 0; {
				res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
					Group: "g", Consumer: "c", Streams: []string{stream, ">"}, Count: 1000, Block: time.Second,
				}).Result()
				if err != nil {
					b.Fatal(err)
				}
				msgs := res[0].Messages
				ids := make([]string, len(msgs))
				for i, m := range msgs {
					ids[i] = m.ID
				}
				if err := rdb.XAck(ctx, stream, "g", ids...).Err(); err != nil {
					b.Fatal(err)
				}
				left -= len(msgs)
			}
			return func() {}
		})
	})
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("source-batch-%d", batch), func(b *testing.B) {
			c := srv.NewClient()
			defer c.Close()
			drain(b, rdb, func(ctx context.Context, stream string) func() {
				src, err := New(c, Options{Kind: KindStream, Stream: stream, Group: "g", Consumer: "c", Batch: batch}, zerolog.Nop())
				if err != nil {
					b.Fatal(err)
				}
				return sourceDrain(b, ctx, src, batch)
			})
		})
	}
}

// BenchmarkDrainEngineShape drains through the shape of the engine's runtime: an unbuffered
// delivery channel, two handler goroutines, a decisions channel and one settler goroutine that
// settles whatever decisions are waiting. It shows how the decisions buffer sets the size of
// each Settle call, and so the number of round trips per message.
func BenchmarkDrainEngineShape(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	for _, buf := range []int{2, 1024} {
		b.Run(fmt.Sprintf("decisions-buffer-%d", buf), func(b *testing.B) {
			c := srv.NewClient()
			defer c.Close()
			var calls, settled int
			drain(b, rdb, func(ctx context.Context, stream string) func() {
				src, err := New(c, Options{Kind: KindStream, Stream: stream, Group: "g", Consumer: "c", Batch: 1000}, zerolog.Nop())
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(ctx)
				batches, out := transporttest.Flatten(ctx, 1000)
				decisions := make(chan engine.Settlement, buf)
				done := make(chan error, 1)
				go func() { done <- src.Receive(ctx, batches) }()
				for range 2 {
					go func() {
						for {
							select {
							case d := <-out:
								decisions <- engine.Settlement{Delivery: d, Action: engine.ActAck}
							case <-ctx.Done():
								return
							}
						}
					}()
				}
				sts := make([]engine.Settlement, 0, 512)
				for n := 0; n < benchEntries; {
					sts = append(sts[:0], <-decisions)
				more:
					for len(sts) < 512 {
						select {
						case st := <-decisions:
							sts = append(sts, st)
						default:
							break more
						}
					}
					if err := src.Settle(ctx, sts); err != nil {
						b.Fatal(err)
					}
					n += len(sts)
					calls++
					settled += len(sts)
				}
				return func() {
					cancel()
					<-done
					src.Close()
				}
			})
			b.ReportMetric(float64(settled)/float64(calls), "settlements/call")
		})
	}
}

// sourceDrain plays a no-op engine: it takes deliveries as they come and settles whatever has
// arrived (up to a batch) with one Settle call. It returns once everything is settled, with a
// function that stops the source (outside the timing: the last read blocks for up to block).
func sourceDrain(b *testing.B, ctx context.Context, src *Source, batch int) func() {
	ctx, cancel := context.WithCancel(ctx)
	batches, out := transporttest.Flatten(ctx, 1000)
	done := make(chan error, 1)
	go func() { done <- src.Receive(ctx, batches) }()
	sts := make([]engine.Settlement, 0, batch)
	for settled := 0; settled < benchEntries; {
		sts = append(sts[:0], engine.Settlement{Delivery: <-out, Action: engine.ActAck})
	more:
		for len(sts) < batch {
			select {
			case d := <-out:
				sts = append(sts, engine.Settlement{Delivery: d, Action: engine.ActAck})
			default:
				break more
			}
		}
		if err := src.Settle(ctx, sts); err != nil {
			b.Fatal(err)
		}
		settled += len(sts)
	}
	return func() {
		cancel()
		<-done
		src.Close()
	}
}

// drain preloads a fresh stream per iteration (untimed) and times fn draining it.
func drain(b *testing.B, rdb *redis.Client, fn func(ctx context.Context, stream string) (stop func())) {
	ctx := context.Background()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		stream := fmt.Sprintf("bench-%s-%d", b.Name(), i)
		preload(b, rdb, stream)
		b.StartTimer()
		start := time.Now()
		stop := fn(ctx, stream)
		total += time.Since(start)
		b.StopTimer()
		stop()
		if n, _ := rdb.XPending(ctx, stream, "g").Result(); n.Count != 0 {
			b.Fatalf("%d entries left pending", n.Count)
		}
		rdb.Del(ctx, stream)
		b.StartTimer()
	}
	b.ReportMetric(float64(benchEntries*b.N)/total.Seconds(), "msgs/s")
}

func preload(b testing.TB, rdb *redis.Client, stream string) {
	ctx := context.Background()
	payload := `{"id":12345,"amount":99.5,"currency":"EUR"}`
	for done := 0; done < benchEntries; done += 1000 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := 0; j < 1000; j++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"payload", payload, "tenant", "t1"}})
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := rdb.XGroupCreate(ctx, stream, "g", "0").Err(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReadParse reads the same 1,000 pending entries (XREADGROUP from 0) on a RESP2
// connection and converts them into deliveries, with go-redis's XREADGROUP (a map per entry:
// the reads of a TLS or Cluster source) and as the other sources' reads of new entries do
// (rawRead: the reply parsed as it comes). Redis's own work is in both:
//
//	go test -run '^$' -bench ReadParse -benchmem ./transports/redisstream/
func BenchmarkReadParse(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	const n = 1000
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range n {
			p.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"payload", `{"id":12345,"amount":99.5,"currency":"EUR"}`}})
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	rdb.XGroupCreate(ctx, "s", "g", "0")
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"s", ">"}, Count: n})
	src, err := New(rdb, Options{Kind: KindStream, Stream: "s", Group: "g", Consumer: "c"}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	var dialed dialedConn
	rc := src.newReadClient(dialed.Store)
	defer rc.Close()
	conn := rc.Conn()
	defer conn.Close()
	if err := conn.Ping(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	o := rc.Options()
	raw := newRawRead(dialed.load(), o.ReadTimeout, o.WriteTimeout)
	b.Run("go-redis", func(b *testing.B) {
		for range b.N {
			msgs, err := src.xreadgroup(ctx, conn, "0", n, -1)
			if err != nil || len(src.deliveries(msgs)) != n {
				b.Fatal(len(msgs), err)
			}
		}
	})
	b.Run("raw", func(b *testing.B) {
		for range b.N {
			ds, _, err := raw.readGroup(ctx, src, "0", n, -1)
			if err != nil || len(ds) != n {
				b.Fatal(len(ds), err)
			}
		}
	})
}

// BenchmarkSettleAck settles batches of 1000 acknowledgements (ids not pending: Redis's work
// is small), reporting this process's allocations per batch, steadier than the bench's rates:
//
//	go test -run '^$' -bench SettleAck -benchmem ./transports/redisstream/
func BenchmarkSettleAck(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.NewClient()
	defer c.Close()
	src, err := New(c, Options{Kind: KindClaiming, Stream: "s", Group: "g", Consumer: "c", MinIdle: time.Minute}, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	if err := c.XGroupCreateMkStream(ctx, "s", "g", "0").Err(); err != nil {
		b.Fatal(err)
	}
	batch := make([]engine.Settlement, 1000)
	for i := range batch {
		id := fmt.Sprintf("%d-0", i+1)
		batch[i] = engine.Settlement{Delivery: &engine.Delivery{Message: engine.Message{Key: "s", ID: id}, Token: id}, Action: engine.ActAck}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := src.Settle(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}
