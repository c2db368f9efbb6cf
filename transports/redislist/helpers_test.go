package redislist

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/internal/sourcetest"
)

// waitTimeout bounds every poll in these tests.
const waitTimeout = 10 * time.Second

// receiver runs a source's Receive in the background with a feed of one batch, as the engine does.
type receiver struct {
	src    *Source
	ch     chan *engine.Delivery
	cancel context.CancelFunc
	done   chan error
}

func receive(t *testing.T, src *Source) *receiver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	feed, ch := sourcetest.Flatten(context.WithoutCancel(ctx), src.opts.Batch)
	r := &receiver{src: src, ch: ch, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Receive(ctx, feed) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Receive and waits for it; it returns Receive's error (nil for a clean stop).
func (r *receiver) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if !ok {
			return nil
		}
		close(r.done)
		// As the engine does at a stop: give back what was handed over and never taken, then
		// close the source.
		var untaken []*engine.Delivery
	drain:
		for {
			select {
			case d := <-r.ch:
				untaken = append(untaken, d)
			case <-time.After(100 * time.Millisecond):
				break drain
			}
		}
		r.src.Return(untaken)
		r.src.Close()
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case <-time.After(waitTimeout):
		t.Fatal("Receive did not return after cancel")
		return nil
	}
}

func (r *receiver) next(t *testing.T) *engine.Delivery {
	t.Helper()
	select {
	case d := <-r.ch:
		return d
	case <-time.After(waitTimeout):
		t.Fatal("no delivery")
		return nil
	}
}

// none asserts that no delivery arrives within d.
func (r *receiver) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-r.ch:
		t.Fatalf("unexpected delivery %q", got.Payload)
	case <-time.After(d):
	}
}

func newSource(t *testing.T, c redis.UniversalClient, opts Options) *Source {
	t.Helper()
	if opts.Block == 0 {
		opts.Block = 100 * time.Millisecond // quick stops
	}
	src, err := New(c, opts, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func lrange(t *testing.T, c redis.UniversalClient, key string) []string {
	t.Helper()
	v, err := c.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantList(t *testing.T, c redis.UniversalClient, key string, want ...string) {
	t.Helper()
	if got := lrange(t, c, key); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("LRANGE %s = %q, want %q", key, got, want)
	}
}

func llen(t *testing.T, c redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := c.LLen(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !redistest.WaitFor(context.Background(), waitTimeout, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func lpush(t *testing.T, c redis.UniversalClient, key string, vals ...string) {
	t.Helper()
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
	}
	if err := c.LPush(context.Background(), key, args...).Err(); err != nil {
		t.Fatal(err)
	}
}
