package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelDownAfter is the down-after-milliseconds of StartSentinel: a master that stops
// answering is failed over about this long, plus an election, after it stopped.
const SentinelDownAfter = time.Second

// SentinelMaster is the master name StartSentinel's sentinels monitor.
const SentinelMaster = "flowrun-master"

// Sentinel is a master, one replica and the sentinels that monitor them.
type Sentinel struct {
	Master    *Server // the master at start; after a failover ask MasterAddr
	Replica   *Server
	Sentinels []*Server
}

// StartSentinel starts a master, a replica of it and n sentinels (quorum n/2+1,
// down-after-milliseconds SentinelDownAfter), and waits until every sentinel knows the replica
// (and the other sentinels), so that a failover can start as soon as the master fails. Extra
// args go to the master and the replica. Everything is stopped when the test ends.
func StartSentinel(t testing.TB, n int, args ...string) *Sentinel {
	t.Helper()
	if n < 1 {
		n = 1
	}
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	fast := []string{"--repl-diskless-sync-delay", "0"} // replicas sync at once
	st := &Sentinel{Master: Start(t, append(fast, args...)...)}
	host, port, _ := strings.Cut(st.Master.Addr, ":")
	st.Replica = Start(t, append(append(fast, "--replicaof", host, port), args...)...)
	ctx := context.Background()
	if !WaitFor(ctx, clusterTimeout, func() bool { return linkUp(ctx, st.Replica) }) {
		t.Fatalf("redistest: replica %s did not sync with %s", st.Replica.Addr, st.Master.Addr)
	}
	for range n {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s %[4]d\n"+
			"sentinel down-after-milliseconds %[1]s %[5]d\n"+
			"sentinel failover-timeout %[1]s 10000\n"+
			"sentinel parallel-syncs %[1]s 1\n",
			SentinelMaster, host, port, n/2+1, SentinelDownAfter.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &Server{bin: bin, dir: dir, conf: conf, sentinel: true}
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		st.Sentinels = append(st.Sentinels, s)
	}
	ok := WaitFor(ctx, clusterTimeout, func() bool {
		for _, s := range st.Sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
			replicas, err1 := c.Replicas(ctx, SentinelMaster).Result()
			others, err2 := c.Sentinels(ctx, SentinelMaster).Result()
			c.Close()
			if err1 != nil || err2 != nil || len(replicas) == 0 || len(others) < n-1 {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("redistest: sentinels did not discover the replica and each other within %s", clusterTimeout)
	}
	return st
}

func linkUp(ctx context.Context, s *Server) bool {
	c := s.NewClient()
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	return err == nil && strings.Contains(info, "master_link_status:up")
}

// Addrs returns the sentinels' addresses.
func (st *Sentinel) Addrs() []string {
	a := make([]string, len(st.Sentinels))
	for i, s := range st.Sentinels {
		a[i] = s.Addr
	}
	return a
}

// MasterAddr returns the master's address as the first sentinel that answers names it.
func (st *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var lastErr error
	for _, s := range st.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
		a, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
		c.Close()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1], nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("redistest: no sentinel names the master: %v", lastErr)
}

// WaitFailover waits until every sentinel names a master other than old and that server says it
// is a master; it returns that server and when the failover was first seen complete. It fails
// the test after 30 s.
func (st *Sentinel) WaitFailover(t testing.TB, old *Server) (*Server, time.Time) {
	t.Helper()
	ctx := context.Background()
	var next *Server
	ok := WaitFor(ctx, clusterTimeout, func() bool {
		addr := ""
		for _, s := range st.Sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
			a, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
			c.Close()
			if err != nil || len(a) != 2 {
				return false
			}
			got := a[0] + ":" + a[1]
			if got == old.Addr || (addr != "" && got != addr) {
				return false
			}
			addr = got
		}
		for _, s := range []*Server{st.Master, st.Replica} {
			if s.Addr != addr {
				continue
			}
			c := s.NewClient()
			role, err := c.Do(ctx, "ROLE").Slice()
			c.Close()
			if err == nil && len(role) > 0 && role[0] == "master" {
				next = s
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("redistest: sentinels did not fail %s over within %s", old.Addr, clusterTimeout)
	}
	return next, time.Now()
}
