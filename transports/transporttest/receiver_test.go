package transporttest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

// fakeSource pushes n deliveries, asking Room before each read unless greedy, then waits for
// the stop.
type fakeSource struct {
	n      int
	greedy bool
}

func (s *fakeSource) Receive(ctx context.Context, feed engine.Feed) error {
	room := 0
	for i := range s.n {
		if room == 0 && !s.greedy {
			if room = feed.Room(ctx); room == 0 {
				return ctx.Err()
			}
		}
		room--
		d := &engine.Delivery{Message: engine.Message{Headers: map[string]string{}, Payload: []byte(fmt.Sprint(i))}}
		if !feed.Push(ctx, []*engine.Delivery{d}) {
			return ctx.Err()
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *fakeSource) Settle(context.Context, []engine.Settlement) error { return nil }
func (s *fakeSource) Requeue(context.Context, []*engine.Message) error  { return nil }
func (s *fakeSource) Capabilities() engine.Capabilities                 { return engine.Capabilities{} }
func (s *fakeSource) Close() error                                      { return nil }

// errorsTB records what a Receiver reports instead of failing the test.
type errorsTB struct {
	testing.TB
	errs []string
}

func (e *errorsTB) Helper() {}
func (e *errorsTB) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// The Receiver's feed reports a source that reads more than Room allowed, and only that one.
func TestReceiverChecksRoom(t *testing.T) {
	for _, greedy := range []bool{false, true} {
		t.Run(fmt.Sprintf("greedy=%v", greedy), func(t *testing.T) {
			tb := &errorsTB{TB: t}
			r := Receive(tb, &fakeSource{n: 5, greedy: greedy}, 2)
			for i, d := range r.Take(t, 5) {
				if string(d.Payload) != fmt.Sprint(i) {
					t.Fatalf("delivery %d = %q", i, d.Payload)
				}
			}
			if err := r.Stop(tb); err != nil {
				t.Fatalf("Stop = %v", err)
			}
			breached := len(tb.errs) > 0 && strings.Contains(tb.errs[0], "more than Room allowed")
			if breached != greedy {
				t.Fatalf("reported %q for a source that asks Room: %v", tb.errs, !greedy)
			}
		})
	}
}
