package redistest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// fatalTB records how a helper ended a test: Fatal or Skip. Both stop the goroutine, as the
// real ones do.
type fatalTB struct {
	testing.TB
	how, msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatal(args ...any) {
	f.how, f.msg = "fatal", fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fatalTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }
func (f *fatalTB) Skip(args ...any) {
	f.how, f.msg = "skip", fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fatalTB) Skipf(format string, args ...any) { f.Skip(fmt.Sprintf(format, args...)) }

// TestMissingServerFails: without redis-server on PATH, Start fails the test (CI set or not) and
// StartMain returns ErrNoServer, both naming the package to install.
func TestMissingServerFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "")
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(f)
	}()
	<-done
	if f.how != "fatal" || !strings.Contains(f.msg, "redis-server not found: apt-get install redis-server") {
		t.Fatalf("Start without redis-server: %s %q, want a failure naming apt-get install redis-server", f.how, f.msg)
	}
	_, _, err := StartMain()
	if !errors.Is(err, ErrNoServer) || !strings.Contains(err.Error(), "apt-get install redis-server") {
		t.Fatalf("StartMain without redis-server: %v", err)
	}
}

// TestHACluster forms a six-node cluster, kills the master of a key's slot and checks that its
// replica takes over with the data Sync made sure it had.
func TestHACluster(t *testing.T) {
	c := StartHACluster(t)
	ctx := context.Background()
	cl := c.Client(t)
	const key = "{hac}k"
	if err := cl.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m := c.MasterOf(t, key)
	r := c.ReplicaOf(t, m)
	Sync(t, m, 1)
	killed := time.Now()
	m.Kill()
	if c.Healthy(key) {
		t.Log("cluster still reports healthy right after the kill (failure not detected yet)")
	}
	healthy := c.WaitHealthy(t, key)
	t.Logf("failover took %s", healthy.Sub(killed).Round(time.Millisecond))
	if got := c.MasterOf(t, key); got != r {
		t.Fatalf("master after failover = %s, want the replica %s", got.Addr, r.Addr)
	}
	if v, err := r.Client(t).Get(ctx, key).Result(); err != nil || v != "v" {
		t.Fatalf("get on the new master = %q, %v; want v", v, err)
	}
}

// TestSentinelFailover: one sentinel promotes the replica after the master is killed.
func TestSentinelFailover(t *testing.T) {
	st := StartSentinel(t, 1)
	ctx := context.Background()
	if a, err := st.MasterAddr(ctx); err != nil || a != st.Master.Addr {
		t.Fatalf("master addr = %q, %v; want %s", a, err, st.Master.Addr)
	}
	killed := time.Now()
	st.Master.Kill()
	next, at := st.WaitFailover(t, st.Master)
	t.Logf("failover took %s", at.Sub(killed).Round(time.Millisecond))
	if next != st.Replica {
		t.Fatalf("new master %s, want the replica %s", next.Addr, st.Replica.Addr)
	}
}

// TestProxyCutReply: the proxy forwards commands and replies, and an armed cut drops the reply
// of the matching command after Redis ran it (the element moved), closing that connection;
// go-redis retries on a new connection without the caller seeing an error.
func TestProxyCutReply(t *testing.T) {
	s := Start(t)
	p := StartProxy(t, s.Addr)
	direct := s.Client(t)
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v := direct.Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("through the proxy: get = %q", v)
	}
	// A nil reply (nothing to move) is not cut.
	cut := p.CutReply(Command("BLMOVE"))
	if err := c.Do(ctx, "BLMOVE", "src", "dst", "RIGHT", "LEFT", "0.05").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("blmove on an empty list: %v, want redis.Nil", err)
	}
	direct.LPush(ctx, "src", "a")
	// Time out: the retry finds src empty. go-redis reports nothing wrong.
	v, err := c.Do(ctx, "BLMOVE", "src", "dst", "RIGHT", "LEFT", "0.2").Text()
	if !errors.Is(err, redis.Nil) {
		t.Fatalf("blmove whose reply was cut: %q, %v; want redis.Nil from go-redis's silent retry", v, err)
	}
	select {
	case <-cut:
	default:
		t.Fatal("the reply was not cut")
	}
	if got := direct.LRange(ctx, "dst", 0, -1).Val(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("dst = %q, want [a]: Redis ran the command whose reply was lost", got)
	}
}
