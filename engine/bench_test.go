package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkEngineAckEmit runs deliveries through the engine with a handler that emits one
// message and acks: the per-delivery cost of the runtime and settler, without a transport.
func BenchmarkEngineAckEmit(b *testing.B) {
	ds := deliveries(b.N)
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: ds, batch: 256}
	p := &Pipeline{Name: "p", Source: src, Concurrency: 2, Logger: zerolog.Nop(),
		Handler: HandlerFunc(func(context.Context, *Delivery) Result {
			return Result{Outcome: Ack(), Emits: []Emit{{Target: Target{Kind: "record"}, Message: &Message{Key: "out"}}}}
		})}
	sinks := func(Target) (Sink, error) { return discard{}, nil }
	b.ReportAllocs()
	b.ResetTimer()
	if err := New(Options{Sinks: sinks}, p).Run(context.Background()); err != nil {
		b.Fatal(err)
	}
}

type discard struct{}

func (discard) Publish(context.Context, ...*Message) error { return nil }

// BenchmarkQueueHandOver is the time from a source's Push of one delivery to a waiting worker
// taking it, with both goroutines idle in between as at low rates, where every message pays it
// (see Queue.Push). handover-ns/op is that time; ns/op is mostly the idle gap (a sleep of at
// least 100µs; on some virtual machines the timer makes it milliseconds).
func BenchmarkQueueHandOver(b *testing.B) {
	q := NewQueue(16)
	var pushed time.Time // written before Push, read after Take: ordered by the queue's lock
	took := make(chan time.Duration)
	go func() {
		for {
			if _, ok := q.Take(); !ok {
				return
			}
			took <- time.Since(pushed)
		}
	}()
	ctx := context.Background()
	ds := []*Delivery{{}}
	var total time.Duration
	for b.Loop() {
		for waiting := 0; waiting == 0; {
			q.mu.Lock()
			waiting = q.waiting
			q.mu.Unlock()
		}
		time.Sleep(100 * time.Microsecond) // the gap between messages at 10,000 a second, or more
		pushed = time.Now()
		q.Push(ctx, ds)
		total += <-took
	}
	q.Close()
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "handover-ns/op")
}

// BenchmarkEngineFlow runs deliveries through the engine under each flow block with the
// in-process store (100 keys, unique dedupe ids, limits that never bind): the per-delivery cost
// of flow control's admission and release, without a transport.
func BenchmarkEngineFlow(b *testing.B) {
	for _, bc := range []struct {
		name string
		flow func() *Flow
	}{
		{"concurrency_key", func() *Flow { return &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1}} }},
		{"throttle", func() *Flow {
			return &Flow{Throttle: &Throttle{Key: headerKey("k"), Limit: 1 << 30, Period: time.Second}}
		}},
		{"dedupe", func() *Flow { return &Flow{Dedupe: &Dedupe{Key: headerKey("id"), Window: time.Hour}} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ds := deliveries(b.N)
			for i, d := range ds {
				d.Headers["k"], d.Headers["id"] = strconv.Itoa(i%100), d.ID
			}
			src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: ds, batch: 1000}
			p := &Pipeline{Name: "p", Source: src, Concurrency: 64, Logger: zerolog.Nop(), Flow: bc.flow(),
				Handler: HandlerFunc(func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} })}
			b.ReportAllocs()
			b.ResetTimer()
			if err := New(Options{}, p).Run(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}
