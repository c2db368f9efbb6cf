package redislist

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(m.Run()) // TestKillMidBacklog's consumer process: it is given a server
	}
	os.Exit(redistest.Main(m)) // one redis-server shared by the tests that need no server of their own
}

// The conformance suite (transporttest) for the reliable and the simple list, on the package's
// shared redis-server.
func TestConformance(t *testing.T) {
	srv := redistest.Shared(t)
	reliable := transporttest.Features{Ack: true, DeadLetter: transporttest.KindList, ReadsCopies: true,
		Redelivers: true, PoisonCommand: "lpush", PoisonReason: "wrongtype"}
	durable := reliable
	durable.DurableDelay = true
	tests := []struct {
		name     string
		reliable bool
		delay    string
		f        transporttest.Features
	}{
		{"reliable", true, "", reliable},
		{"reliable durable_zset", true, DelayDurableZSet, durable},
		{"simple", false, "", transporttest.Features{DeadLetter: transporttest.KindList, ReadsCopies: true,
			PoisonCommand: "lpush", PoisonReason: "wrongtype"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // the variants use keys of their own
			transporttest.Run(t, tt.f, func(t *testing.T, o transporttest.SourceOptions) transporttest.Harness {
				opts := Options{Key: o.Key, Reliable: tt.reliable, Consumer: "w1", Batch: o.Batch, Block: 100 * time.Millisecond,
					DelayedRetry: tt.delay}
				opts.setDefaults()
				return &harness{Redis: transporttest.NewRedis(t, srv.Addr), opts: opts}
			})
		})
	}
}

// harness is the suite's view of a list source: LPUSH in, LRANGE out.
type harness struct {
	*transporttest.Redis
	opts Options
}

func (h *harness) Source(t testing.TB) engine.Source {
	src, err := New(h.NewClient(t), h.opts, transporttest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func (h *harness) Key() string      { return h.opts.Key }
func (h *harness) RetryKey() string { return h.opts.Key }
func (h *harness) End(testing.TB)   {}

// Delayed lists the delay queue's copies, due first, decoded as the list will read them.
func (h *harness) Delayed(t testing.TB) []transporttest.Delayed {
	if h.opts.DelayKey == "" {
		return nil
	}
	zs, err := h.Client.ZRangeWithScores(context.Background(), h.opts.DelayKey, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]transporttest.Delayed, len(zs))
	for i, z := range zs {
		hdr, p := codec.DecodeEnvelope([]byte(DelayedElement(z.Member.(string))))
		out[i] = transporttest.Delayed{Message: &engine.Message{Key: h.opts.Key, Headers: hdr, Payload: p},
			Due: time.UnixMilli(int64(z.Score))}
	}
	return out
}

func (h *harness) Inject(t testing.TB, msgs ...*engine.Message) {
	vals := make([]any, len(msgs))
	for i, m := range msgs {
		vals[i] = codec.EncodeEnvelope(m)
	}
	if err := h.Client.LPush(context.Background(), h.opts.Key, vals...).Err(); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) Unsettled(t testing.TB) int {
	if !h.opts.Reliable {
		return 0
	}
	return h.Len(t, h.opts.Processing)
}
