package redispubsub

import (
	"context"
	"os"
	"testing"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

func TestMain(m *testing.M) {
	os.Exit(redistest.Main(m)) // one redis-server shared by the tests that need no server of their own
}

// The conformance suite (transporttest) for channel and pattern subscriptions, on the package's
// shared redis-server.
func TestConformance(t *testing.T) {
	srv := redistest.Shared(t)
	f := transporttest.Features{DeadLetter: transporttest.KindStream, Live: true, ReadsCopies: true,
		PoisonCommand: "xadd", PoisonReason: "wrongtype"}
	for _, patterns := range []bool{false, true} {
		name := map[bool]string{false: "channels", true: "patterns"}[patterns]
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the variants use keys of their own
			transporttest.Run(t, f, func(t *testing.T, o transporttest.SourceOptions) transporttest.Harness {
				h := &harness{Redis: transporttest.NewRedis(t, srv.Addr), key: o.Key, retry: o.Key}
				h.opts.Channels = []string{o.Key}
				if patterns {
					// The pattern matches retry_to too: copies come back, from retry_to.
					h.retry = o.Key + ".retry"
					h.opts = Options{Patterns: []string{o.Key + "*"}, RetryTo: h.retry}
				}
				h.Watch(t, h.key, h.retry)
				return h
			})
		})
	}
}

// harness is the suite's view of a Pub/Sub source: PUBLISH in; what is published to the channel
// and retry_to, and the dead-letter stream, out.
type harness struct {
	*transporttest.Redis
	opts       Options
	key, retry string
}

func (h *harness) Source(t testing.TB) engine.Source {
	src, err := New(h.NewClient(t), h.opts, transporttest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func (h *harness) Key() string                                { return h.key }
func (h *harness) RetryKey() string                           { return h.retry }
func (h *harness) End(testing.TB)                             {}
func (h *harness) Unsettled(testing.TB) int                   { return 0 }
func (h *harness) Delayed(testing.TB) []transporttest.Delayed { return nil }

func (h *harness) Inject(t testing.TB, msgs ...*engine.Message) {
	for _, m := range msgs {
		if err := h.Client.Publish(context.Background(), h.key, codec.EncodeEnvelope(m)).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
