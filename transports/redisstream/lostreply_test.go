package redisstream

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/internal/redistest"
)

// TestLostReadReply: the reply of the XREADGROUP that read an entry is lost with its connection
// (a proxy cuts it); go-redis retries the read elsewhere without an error, and the entry is
// pending for this consumer though never handed out. The source sees the broken connection and
// re-reads its own pending entries: the entry comes within a read or two.
func TestLostReadReply(t *testing.T) {
	e := newEnv(t)
	proxy := redistest.StartProxy(t, e.srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { c.Close() })
	src, err := New(c, streamOpts("lr"), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	r := e.run(src, nil)
	first := e.xadd("lr", "payload", "first")
	if d := r.Next(t); d.ID != first {
		t.Fatalf("got %s, want %s", d.ID, first)
	}
	cut := proxy.CutReply(redistest.Command("XREADGROUP", ">"))
	added := time.Now()
	lost := e.xadd("lr", "payload", "lost")
	select {
	case <-cut:
	case <-time.After(5 * time.Second):
		t.Fatal("the XREADGROUP reply was never cut")
	}
	d := r.Next(t)
	took := time.Since(added)
	if d.ID != lost {
		t.Fatalf("got %s, want the entry whose reply was lost (%s)", d.ID, lost)
	}
	t.Logf("entry whose XREADGROUP reply was lost handed over after %s", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("handed over after %s, want within a read or two", took)
	}
	r.None(t, 300*time.Millisecond) // once
}

// TestNewPoolConnectionIsNoReconnect: the client's pool growing (settlements, emits and
// keep-alives take connections of their own) is not a reconnect: an entry made this consumer's
// pending behind its back stays untouched until a connection really breaks.
func TestNewPoolConnectionIsNoReconnect(t *testing.T) {
	e := newOwnEnv(t)
	// "stranded" is read by another consumer before the source starts: never new for it.
	stranded := e.xadd("np", "payload", "stranded")
	e.rdb.XGroupCreate(e.ctx, "np", "g", "0")
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "other", Streams: []string{"np", ">"}, Count: 1})
	c, _ := e.client()
	src, err := New(c, streamOpts("np"), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	r := e.run(src, nil)
	a := e.xadd("np", "payload", "a")
	if d := r.Next(t); d.ID != a {
		t.Fatalf("got %s, want %s", d.ID, a)
	}
	e.waitFor("ready", 5*time.Second, src.Ready)
	// It becomes this consumer's pending entry behind the source's back.
	if err := e.rdb.XClaim(e.ctx, &redis.XClaimArgs{Stream: "np", Group: "g", Consumer: "c1", Messages: []string{stranded}}).Err(); err != nil {
		t.Fatal(err)
	}
	before := c.PoolStats().TotalConns
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { c.Do(e.ctx, "BLPOP", "np:nothing", "0.2") })
	}
	wg.Wait()
	if after := c.PoolStats().TotalConns; after <= before {
		t.Fatalf("pool did not grow (%d -> %d connections)", before, after)
	}
	r.None(t, time.Second) // no re-read: the stranded entry is not handed out
	// A connection that breaks in use is a reconnect: now the entry comes.
	e.killClients()
	if d := r.Next(t); d.ID != stranded {
		t.Fatalf("after a broken connection got %s, want %s", d.ID, stranded)
	}
}
