package redisstream

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// trim = "acked" trims only below what every group has finished with (SPEC §11).
func TestTrimAcked(t *testing.T) {
	e := newEnv(t)
	ids := e.xaddN("s", 10)
	for _, g := range []string{"a", "b"} {
		if err := e.rdb.XGroupCreate(e.ctx, "s", g, "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// a: read all 10, acked the first 6 (lowest pending ids[6]); b: read 4, acked all 4.
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "a", Consumer: "c", Streams: []string{"s", ">"}, Count: 10})
	e.rdb.XAck(e.ctx, "s", "a", ids[:6]...)
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "b", Consumer: "c", Streams: []string{"s", ">"}, Count: 4})
	e.rdb.XAck(e.ctx, "s", "b", ids[:4]...)
	src := newTestSource(t, e, Options{Kind: KindStream, Stream: "s", Group: "a", Consumer: "c", Trim: TrimAcked})
	n, err := src.trimAcked(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// b has finished with ids[0..3] and was last delivered ids[3]: everything below ids[3] goes.
	if n != 3 || e.rdb.XLen(e.ctx, "s").Val() != 7 {
		t.Fatalf("trimmed %d, xlen %d; want 3 and 7", n, e.rdb.XLen(e.ctx, "s").Val())
	}
	// b reads and acks the rest: now a's lowest pending (ids[6]) bounds it.
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "b", Consumer: "c", Streams: []string{"s", ">"}, Count: 10})
	e.rdb.XAck(e.ctx, "s", "b", ids[4:]...)
	if _, err := src.trimAcked(e.ctx); err != nil {
		t.Fatal(err)
	}
	if first := e.rdb.XRangeN(e.ctx, "s", "-", "+", 1).Val(); len(first) != 1 || first[0].ID != ids[6] {
		t.Fatalf("first entry %v, want %s (a's lowest pending)", first, ids[6])
	}
}

// consumer_ttl deletes idle consumers that own nothing, never one with pending entries.
func TestConsumerTTL(t *testing.T) {
	e := newEnv(t)
	e.xaddN("s", 2)
	e.rdb.XGroupCreate(e.ctx, "s", "g", "0")
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "holder", Streams: []string{"s", ">"}, Count: 1})
	e.rdb.XGroupCreateConsumer(e.ctx, "s", "g", "idle")
	src := newTestSource(t, e, Options{Kind: KindStream, Stream: "s", Group: "g", Consumer: "me", ConsumerTTL: 50 * time.Millisecond})
	names := func() map[string]bool {
		out := map[string]bool{}
		for _, c := range e.rdb.XInfoConsumers(e.ctx, "s", "g").Val() {
			out[c.Name] = true
		}
		return out
	}
	e.waitFor("the consumers to be idle", 5*time.Second, func() bool {
		if err := src.dropIdleConsumers(e.ctx); err != nil {
			t.Fatal(err)
		}
		return !names()["idle"]
	})
	if !names()["holder"] {
		t.Fatal("a consumer with a pending entry was deleted")
	}
}

// newTestSource is a source on the test's server that is never started: its methods are called
// directly.
func newTestSource(t *testing.T, e *env, o Options) *Source {
	t.Helper()
	src, err := New(e.rdb, o, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}
