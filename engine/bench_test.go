package engine

import (
	"context"
	"testing"

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
