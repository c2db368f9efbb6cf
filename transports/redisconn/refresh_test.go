package redisconn

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

func TestStaleSlots(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.Nil, false},
		{context.Canceled, false},
		{redis.ErrClosed, false},
		{replyErr("MOVED 3999 127.0.0.1:6381"), true},
		{replyErr("CLUSTERDOWN The cluster is down"), true},
		{replyErr("READONLY You can't write against a read only replica."), true},
		{replyErr("MASTERDOWN Link with MASTER is down"), true},
		{replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyErr("NOPERM this user has no permissions"), false},
		{fmt.Errorf("xreadgroup: %w", io.EOF), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
	}
	for _, tt := range tests {
		if got := staleSlots(tt.err); got != tt.want {
			t.Errorf("staleSlots(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestClusterFailoverRefresh runs against a real six-node cluster: after the master of a key's
// slot is killed and its replica has taken over, a client from New writes the key again within
// seconds, where go-redis alone would keep sending to the dead master until its one-minute
// reload timer fired.
func TestClusterFailoverRefresh(t *testing.T) {
	cl := redistest.StartHACluster(t)
	c, err := New(Options{Cluster: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const key = "{refresh}k"
	if err := c.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	master := cl.MasterOf(t, key)
	redistest.Sync(t, master, 1)
	master.Kill()
	// Keep writing, as a source keeps reading, with a short backoff.
	var healthy time.Time
	deadline := time.Now().Add(40 * time.Second)
	for {
		err := c.Set(ctx, key, "2", 0).Err()
		if healthy.IsZero() && cl.Healthy(key) {
			healthy = time.Now()
		}
		if err == nil && !healthy.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write succeeded within 40 s of the kill: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(healthy)
	t.Logf("writes resumed %s after the cluster was healthy again", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Fatalf("writes resumed %s after the failover, want within 5 s", took)
	}
	if v, err := c.Get(ctx, key).Result(); err != nil || v != "2" {
		t.Fatalf("get = %q, %v", v, err)
	}
}
