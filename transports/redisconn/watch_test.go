package redisconn

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// TestWatchCountsBrokenConnections: a pool that grows under load, or loses idle connections,
// counts nothing; a connection cut with a BLMOVE on it counts once, although go-redis retried
// the command and reported no error.
func TestWatchCountsBrokenConnections(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c, err := New(Options{URL: proxy.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := Watch(c)
	if Watch(c) != w {
		t.Fatal("a second Watch of one client returned another ConnWatch")
	}
	ctx := context.Background()

	// Many connections at once: the pool grows, and that is no failure.
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() { c.Do(ctx, "BLPOP", "nothing", "0.1") })
	}
	wg.Wait()
	if n := c.PoolStats().TotalConns; n < 2 {
		t.Fatalf("pool has %d connections, want several", n)
	}
	if b := w.Broken(); b != 0 {
		t.Fatalf("broken = %d after the pool grew, want 0", b)
	}

	// The reply of a BLMOVE that moved an element is lost with its connection.
	direct := srv.Client(t)
	cut := proxy.CutReply(redistest.Command("BLMOVE"))
	direct.LPush(ctx, "src", "a")
	if err := c.Do(ctx, "BLMOVE", "src", "dst", "RIGHT", "LEFT", "0.1").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("blmove whose reply was lost: %v, want go-redis's silent retry to time out (redis.Nil)", err)
	}
	<-cut
	if b := w.Broken(); b != 1 {
		t.Fatalf("broken = %d after one lost reply, want 1", b)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if b := w.Broken(); b != 1 {
		t.Fatalf("broken = %d after a ping, want still 1", b)
	}
}

// TestWatchClusterNodes: a cluster client from New watches the connections of its nodes.
func TestWatchClusterNodes(t *testing.T) {
	srv := redistest.StartCluster(t)
	c, err := New(Options{Cluster: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	w := Watch(c)
	direct := srv.Client(t)
	// Kill the cluster client's connections while one blocks in BLPOP: that one broke in use.
	done := make(chan error, 1)
	go func() { done <- c.BLPop(ctx, time.Second, "empty").Err() }()
	ok := redistest.WaitFor(ctx, 5*time.Second, func() bool {
		list, _ := direct.Do(ctx, "CLIENT", "LIST").Text()
		return strings.Contains(list, "cmd=blpop")
	})
	if !ok {
		t.Fatal("BLPOP never reached the server")
	}
	direct.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	<-done
	if w.Broken() == 0 {
		t.Fatal("a cluster node's connection broke in use and was not counted")
	}
}

// TestWatchForgetsCollectedClients: the registry does not keep a closed, unreferenced client.
func TestWatchForgetsCollectedClients(t *testing.T) {
	count := func() int {
		n := 0
		watches.Range(func(_, _ any) bool { n++; return true })
		return n
	}
	before := count()
	func() {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		Watch(c)
		c.Close()
	}()
	ok := redistest.WaitFor(context.Background(), 5*time.Second, func() bool {
		runtime.GC()
		return count() <= before
	})
	if !ok {
		t.Fatalf("watches holds %d entries, want %d: a collected client was kept", count(), before)
	}
}
