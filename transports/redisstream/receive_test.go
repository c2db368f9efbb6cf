package redisstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

// manual is a source whose Receive the test cancels itself, to time it and to settle after it.
type manual struct {
	src    *Source
	out    chan *engine.Delivery
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Receive's, once done is closed
}

func (e *env) startManual(c *redis.Client, opts Options) *manual {
	e.t.Helper()
	src, err := New(c, opts, zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &manual{src: src, out: make(chan *engine.Delivery), cancel: cancel, done: make(chan struct{})}
	go func() {
		m.err = src.Receive(ctx, m.out)
		close(m.done)
	}()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-m.done:
		case <-time.After(15 * time.Second):
		}
		src.Close()
	})
	return m
}

func (m *manual) recv(t *testing.T, timeout time.Duration) *engine.Delivery {
	t.Helper()
	select {
	case d := <-m.out:
		return d
	case <-time.After(timeout):
		t.Fatalf("no delivery within %s", timeout)
		return nil
	}
}

// After a stop the source hands out nothing more, even to an engine still receiving: entries
// read but not handed over are untracked and stay pending. Run a few times, since before the fix
// it was select's random choice that sometimes handed one out.
func TestNothingHandedOutAfterStop(t *testing.T) {
	e := newEnv(t)
	for i := range 12 {
		stream := fmt.Sprintf("s%d", i)
		e.xaddN(stream, 40)
		o := streamOpts(stream)
		o.Batch = 10
		c, _ := e.client()
		m := e.startManual(c, o)
		// 6 of the first batch handed over; the pusher holds the other 4 and the read-ahead
		// (sent once half a batch was handed over).
		for range 6 {
			m.recv(t, 5*time.Second)
		}
		e.waitFor("the read-ahead", 5*time.Second, func() bool { return m.src.track.len() > 10 })
		read := m.src.track.len()
		m.cancel()
		late := 0
	drain:
		for {
			select {
			case <-m.out:
				late++
			case <-m.done:
				if m.err != nil {
					t.Fatalf("Receive = %v", m.err)
				}
				break drain
			case <-time.After(10 * time.Second):
				t.Fatal("Receive did not return")
			}
		}
		if late > 0 {
			t.Fatalf("run %d: %d entries handed out after the stop", i, late)
		}
		if n := m.src.track.len(); n != 6 {
			t.Fatalf("run %d: %d tracked after the stop, want the 6 handed out", i, n)
		}
		if n := e.pending(stream, "g"); n != int64(read) {
			t.Fatalf("run %d: %d pending, want %d (read, handed out or not)", i, n, read)
		}
	}
}

// Ready is true by the time anything is handed out: a test (or /readyz) that sees a delivery
// sees a ready source. Before the fix Ready was set after the hand-over.
func TestReadyBeforeHandOver(t *testing.T) {
	e := newEnv(t)
	for i := range 10 {
		for _, kind := range []string{KindStream, KindClaiming, KindReclaim} {
			stream := fmt.Sprintf("%s%d", kind, i)
			o := claimOpts(kind, "a")
			o.Stream = stream
			if kind == KindStream {
				o.MinIdle = 0
				// Pending for this consumer already: the very first step (the pending
				// re-read) hands it out.
				if err := e.rdb.XGroupCreateMkStream(e.ctx, stream, "g", "0").Err(); err != nil {
					t.Fatal(err)
				}
				e.xadd(stream, "payload", "p")
				e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "a", Streams: []string{stream, ">"}})
			} else {
				e.xadd(stream, "payload", "p")
			}
			c, _ := e.client()
			m := e.startManual(c, o)
			m.recv(t, 5*time.Second)
			if !m.src.Ready() {
				t.Fatalf("%s run %d: a delivery was handed out while Ready is false", kind, i)
			}
			m.cancel()
		}
	}
}
