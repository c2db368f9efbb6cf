package redislist

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

// TestLostBLMoveReply: the reply of the BLMOVE that moved an element is lost with its connection
// (a proxy cuts it) and go-redis retries the read elsewhere without an error. The source sees
// the broken connection, sweeps its processing list and reads the element again, within a few
// reads, not at the two-minute sweep.
func TestLostBLMoveReply(t *testing.T) {
	srv, direct := redistest.Fresh(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { c.Close() })
	old := sweepEvery
	t.Cleanup(func() { sweepEvery = old })
	sweepEvery = time.Hour // only the broken connection may trigger the sweep here

	src := newSource(t, c, Options{Key: "lr", Reliable: true, Consumer: "w1"})
	r := transporttest.Receive(t, src, src.opts.Batch)
	transporttest.WaitFor(t, "ready", src.Ready)
	lpush(t, direct, "lr", "first")
	first := r.Next(t)

	cut := proxy.CutReply(redistest.Command("BLMOVE"))
	pushed := time.Now()
	lpush(t, direct, "lr", "lost")
	select {
	case <-cut:
	case <-time.After(transporttest.Timeout):
		t.Fatal("the BLMOVE reply was never cut")
	}
	got := r.Next(t)
	took := time.Since(pushed)
	if string(got.Payload) != "lost" {
		t.Fatalf("read %q, want the element whose reply was lost", got.Payload)
	}
	t.Logf("element whose BLMOVE reply was lost handed over after %s", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("handed over after %s, want within a few reads", took)
	}
	if err := src.Settle(context.Background(), []engine.Settlement{
		{Delivery: first, Action: engine.ActAck}, {Delivery: got, Action: engine.ActAck},
	}); err != nil {
		t.Fatal(err)
	}
	wantList(t, direct, "lr:processing:w1")
	wantList(t, direct, "lr")
	r.None(t, 300*time.Millisecond) // handed over once
}
