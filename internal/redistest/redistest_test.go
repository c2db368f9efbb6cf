package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartPingStop(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("get k = %q, want v", got)
	}
	// No persistence: the server must run with save "" and appendonly no.
	save, err := c.ConfigGet(ctx, "save").Result()
	if err != nil {
		t.Fatal(err)
	}
	if save["save"] != "" {
		t.Fatalf("save = %q, want empty", save["save"])
	}
	s.Stop()
	if s.Running() {
		t.Fatal("server still running after Stop")
	}
	s.Stop() // idempotent
}

func TestExtraArgs(t *testing.T) {
	s := Start(t, "--requirepass", "sekret")
	ctx := context.Background()
	err := s.Client(t).Ping(ctx).Err()
	if err == nil {
		t.Fatal("ping without password succeeded")
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: "sekret"})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping with password: %v", err)
	}
}

func TestKillRestart(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()
	c.Set(ctx, "k", "v", 0)
	s.Kill()
	if s.Running() {
		t.Fatal("server running after Kill")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping succeeded while the server is down")
	}
	addr := s.Addr
	s.Restart(t)
	if s.Addr != addr {
		t.Fatalf("restart moved the server from %s to %s", addr, s.Addr)
	}
	ok := WaitFor(ctx, 5*time.Second, func() bool { return c.Ping(ctx).Err() == nil })
	if !ok {
		t.Fatal("client did not reconnect after restart")
	}
	if n := c.Exists(ctx, "k").Val(); n != 0 {
		t.Fatalf("key survived a restart without persistence: exists = %d", n)
	}
}

func TestStartMain(t *testing.T) {
	s, stop, err := StartMain()
	if err != nil {
		t.Fatal(err)
	}
	c := s.NewClient()
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	stop()
	if s.Running() {
		t.Fatal("server running after stop")
	}
}

func TestStartCluster(t *testing.T) {
	s := StartCluster(t)
	c := s.ClusterClient(t)
	ctx := context.Background()
	if err := c.Set(ctx, "a", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Keys in different slots cannot share a MULTI: the cluster is real enough to say so.
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "{x}1", "1", 0)
		p.Set(ctx, "{x}2", "2", 0)
		return nil
	})
	if err != nil {
		t.Fatalf("same-slot MULTI: %v", err)
	}
	err = c.Do(ctx, "MSET", "a", "1", "b", "2").Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("cross-slot MSET err = %v, want CROSSSLOT", err)
	}
}
