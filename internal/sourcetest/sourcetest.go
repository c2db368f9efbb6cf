// Package sourcetest has what tests of a transport need to play the engine's part.
package sourcetest

import (
	"context"

	"github.com/flowrun/flowrun/engine"
)

// Flatten returns a feed to hand to a source's Receive, holding up to limit deliveries as the
// engine would, and a channel that yields what was pushed one by one, in order. Whoever reads
// the channel plays the handlers; like a handler slot, the goroutine behind it holds one
// delivery while it waits to be read. It stops when ctx ends.
func Flatten(ctx context.Context, limit int) (*engine.Queue, chan *engine.Delivery) {
	q, out, _ := flatten(ctx, limit)
	return q, out
}

// Receive runs src.Receive with a feed of limit deliveries until ctx ends. Its error arrives on
// done only once every delivery pushed before Receive returned has been read from out, as a
// finite source's last records are handled before the engine stops.
func Receive(ctx context.Context, src engine.Source, limit int) (out chan *engine.Delivery, done chan error) {
	q, out, drained := flatten(context.WithoutCancel(ctx), limit)
	done = make(chan error, 1)
	go func() {
		err := src.Receive(ctx, q)
		q.Close()
		<-drained
		done <- err
	}()
	return out, done
}

func flatten(ctx context.Context, limit int) (*engine.Queue, chan *engine.Delivery, chan struct{}) {
	q := engine.NewQueue(limit)
	out := make(chan *engine.Delivery)
	drained := make(chan struct{})
	context.AfterFunc(ctx, q.Close)
	go func() {
		defer close(drained)
		for {
			d, ok := q.Take()
			if !ok {
				return
			}
			select {
			case out <- d:
			case <-ctx.Done():
				return
			}
		}
	}()
	return q, out, drained
}
