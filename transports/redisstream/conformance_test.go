package redisstream

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

// The conformance suite (transporttest) for every kind of stream source, on the package's
// shared redis-server, over both read paths: the bare connection (rawRead) and go-redis (as over
// TLS and on a Cluster).
func TestConformance(t *testing.T) {
	srv := redistest.Shared(t)
	stream := transporttest.Features{
		Ack: true, Leave: true, IDs: true, DeadLetter: transporttest.KindStream,
		ReadsCopies: true, Redelivers: true, PoisonCommand: "xadd", PoisonReason: "wrongtype",
	}
	durable := stream
	durable.DurableDelay = true
	claiming := stream
	claiming.RetryInPlace, claiming.DeliveryCount = true, true
	reclaim := claiming
	reclaim.CountsThisDelivery = true
	tests := []struct {
		name string
		f    transporttest.Features
		opts Options
	}{
		{"stream", stream, Options{Kind: KindStream}},
		{"stream durable_zset", durable, Options{Kind: KindStream, DelayedRetry: DelayDurableZSet}},
		{"claiming", claiming, Options{Kind: KindClaiming, MinIdle: conformanceMinIdle}},
		{"reclaim", reclaim, Options{Kind: KindReclaim, MinIdle: conformanceMinIdle}},
	}
	for _, path := range transporttest.ReadPaths {
		for _, tt := range tests {
			t.Run(string(path)+"/"+tt.name, func(t *testing.T) {
				t.Parallel() // the variants use keys of their own
				transporttest.Run(t, tt.f, func(t *testing.T, o transporttest.SourceOptions) transporttest.Harness {
					opts := tt.opts
					opts.Stream, opts.Group, opts.Consumer = o.Key, "g", "c1"
					opts.Batch, opts.Block = o.Batch, 50*time.Millisecond
					if opts.DelayedRetry == DelayDurableZSet {
						opts.DelayKey = o.Key + DelayKeySuffix
					}
					return &harness{Redis: transporttest.NewRedis(t, srv.Addr), opts: opts, path: path}
				})
			})
		}
	}
}

// Each read path of the conformance suite is the one it says: the entries of a plain client are
// read bare, those of a client without a syscall.Conn through go-redis.
func TestConformanceReadPaths(t *testing.T) {
	srv := redistest.Shared(t)
	for _, path := range transporttest.ReadPaths {
		t.Run(string(path), func(t *testing.T) {
			rd := transporttest.NewRedis(t, srv.Addr)
			stream := "readpath-" + string(path)
			src, err := New(rd.NewClientFor(t, path), Options{Kind: KindStream, Stream: stream, Group: "g", Consumer: "c", Batch: 10}, transporttest.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			ctx := context.Background()
			if err := src.ensureGroup(ctx); err != nil {
				t.Fatal(err)
			}
			r := &reader{s: src}
			r.rc = src.newReadClient(r.dialed.Store)
			defer r.rc.Close()
			defer r.dropConn()
			for _, want := range []string{"first", "second"} { // the first read sets the connection up
				if err := rd.Client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"payload", want}}).Err(); err != nil {
					t.Fatal(err)
				}
				ds, err := r.readNew(ctx, 10, -1)
				if err != nil || len(ds) != 1 || string(ds[0].Payload) != want {
					t.Fatalf("read: %d deliveries, %v; want %q", len(ds), err, want)
				}
			}
			if bare := r.raw != nil; bare != (path == transporttest.ReadBare) {
				t.Fatalf("read path %s: reads bare %v", path, bare)
			}
		})
	}
}

// conformanceMinIdle is short, so that entries left pending come back quickly.
const conformanceMinIdle = 150 * time.Millisecond

// harness is the suite's view of a stream source: XADD in, XRANGE and XPENDING out.
type harness struct {
	*transporttest.Redis
	opts Options
	path transporttest.ReadPath
}

func (h *harness) Source(t testing.TB) engine.Source {
	src, err := New(h.NewClientFor(t, h.path), h.opts, transporttest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func (h *harness) Key() string      { return h.opts.Stream }
func (h *harness) RetryKey() string { return h.opts.Stream }
func (h *harness) End(testing.TB)   {}

func (h *harness) Inject(t testing.TB, msgs ...*engine.Message) {
	_, err := h.Client.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for _, m := range msgs {
			p.XAdd(context.Background(), &redis.XAddArgs{Stream: h.opts.Stream, Values: codec.StreamFields(m)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (h *harness) Unsettled(t testing.TB) int {
	return h.PendingCount(t, h.opts.Stream, h.opts.Group)
}

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
		d, err := DecodeDelayed(z.Member.(string))
		if err != nil {
			t.Fatal(err)
		}
		if d.Key != h.opts.Stream {
			t.Fatalf("delayed copy for %q, want %q", d.Key, h.opts.Stream)
		}
		out[i] = transporttest.Delayed{Message: d.Message, Due: time.UnixMilli(int64(z.Score))}
	}
	return out
}
