package redisstream

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// On a Redis Cluster every settlement still works: copies on the stream's slot go in one
// MULTI/EXEC with the XACK (a CROSSSLOT error would show a wrong grouping), and a dead letter
// on another slot is written before its original is acknowledged.
func TestSettleOnCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	ctx := context.Background()
	rdb := srv.ClusterClient(t)
	c, err := redisconn.New(redisconn.Options{Cluster: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const stream = "{orders}"
	if redisconn.SameSlot(c, stream, "dlq") {
		t.Fatal("test needs a dead-letter key on another slot")
	}
	for i := range 4 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"payload", string(rune('a' + i))}})
	}
	src, err := New(c, Options{Kind: KindStream, Stream: stream, Group: "g", Consumer: "c",
		DelayedRetry: DelayDurableZSet, Block: 100 * time.Millisecond}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, ctx: ctx}
	r := e.run(src, nil)
	ds := r.Take(t, 4)
	r.settle(t,
		engine.Settlement{Delivery: ds[0], Action: engine.ActAck},
		engine.Settlement{Delivery: ds[1], Action: engine.ActRequeue, Copy: ds[1].RetryCopy()},
		engine.Settlement{Delivery: ds[2], Action: engine.ActDeadLetter, Copy: ds[2].Message.Clone(), DeadLetterKey: "dlq"},
		engine.Settlement{Delivery: ds[3], Action: engine.ActDelay, Copy: ds[3].RetryCopy(), Due: time.Now().Add(300 * time.Millisecond)},
	)
	for _, d := range ds {
		p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: d.ID, End: d.ID, Count: 1}).Result()
		if err != nil || len(p) != 0 {
			t.Fatalf("%s still pending (%v)", d.ID, err)
		}
	}
	if n := rdb.XLen(ctx, "dlq").Val(); n != 1 {
		t.Fatalf("dlq len %d", n)
	}
	// The requeued copy, then the delayed one once due.
	got := r.Take(t, 2)
	if string(got[0].Payload) != "b" || string(got[1].Payload) != "d" || got[1].Headers["x-retry-count"] != "1" {
		t.Fatalf("copies %q %q %v", got[0].Payload, got[1].Payload, got[1].Headers)
	}
	r.settle(t, ack(got...)...)
	if n := rdb.ZCard(ctx, stream+":delayed").Val(); n != 0 {
		t.Fatalf("delay zset still holds %d", n)
	}
}
