package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterNodeTimeout is the cluster-node-timeout of StartHACluster: a master that stops
// answering is marked failed after about this long, and its replica takes over a second or two
// later.
const ClusterNodeTimeout = time.Second

// clusterTimeout bounds how long forming a cluster, or recovering from a failover, may take.
const clusterTimeout = 30 * time.Second

// Cluster is a real six-node Redis Cluster: three masters, each with one replica.
type Cluster struct {
	// Nodes[0], [1] and [2] start as the masters of slots 0–5460, 5461–10922 and 10923–16383;
	// Nodes[3+i] starts as the replica of Nodes[i]. After a failover the roles differ: ask
	// MasterOf.
	Nodes []*Server
}

// StartHACluster starts six redis-server processes in cluster mode (free ports, one temp dir
// each, cluster-node-timeout ClusterNodeTimeout, a replica may always fail over), joins them
// with CLUSTER MEET, assigns the slots, attaches the replicas with CLUSTER REPLICATE, and waits
// until every node reports cluster_state:ok and every replica is in sync. Extra args go to every
// node. Everything is stopped when the test ends.
func StartHACluster(t testing.TB, args ...string) *Cluster {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{}
	for range 6 {
		s, err := startClusterNode(bin, t.TempDir(), args)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		c.Nodes = append(c.Nodes, s)
	}
	ctx := context.Background()
	if err := c.form(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// startClusterNode starts one cluster-mode server. The cluster bus gets a port of its own
// (--cluster-port): the default, port+10000, may be taken or beyond 65535.
func startClusterNode(bin, dir string, args []string) (*Server, error) {
	var lastErr error
	for range 5 {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		a := []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout.Milliseconds())),
			"--cluster-replica-validity-factor", "0", // a replica may always take over
			"--repl-diskless-sync-delay", "0", // replicas sync at once
		}
		s := &Server{bin: bin, dir: dir, args: append(a, args...)}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// busPort returns the --cluster-port a node was started with.
func (s *Server) busPort() string {
	for i, a := range s.args {
		if a == "--cluster-port" && i+1 < len(s.args) {
			return s.args[i+1]
		}
	}
	return ""
}

func (c *Cluster) form(ctx context.Context) error {
	clients := make([]*redis.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		clients[i] = n.NewClient()
		defer clients[i].Close()
	}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, r := range ranges {
		if err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", r[0], r[1]).Err(); err != nil {
			return fmt.Errorf("redistest: cluster addslotsrange on %s: %w", c.Nodes[i].Addr, err)
		}
	}
	host, port, _ := strings.Cut(c.Nodes[0].Addr, ":")
	for i := 1; i < len(c.Nodes); i++ {
		if err := clients[i].Do(ctx, "CLUSTER", "MEET", host, port, c.Nodes[0].busPort()).Err(); err != nil {
			return fmt.Errorf("redistest: cluster meet from %s: %w", c.Nodes[i].Addr, err)
		}
	}
	known := func(want string) func() bool {
		return func() bool {
			for _, cl := range clients {
				nodes, err := cl.ClusterNodes(ctx).Result()
				if err != nil || strings.Count(nodes, want) != len(c.Nodes) {
					return false
				}
			}
			return true
		}
	}
	// Every node lists all six (each line carries "@busport").
	if !WaitFor(ctx, clusterTimeout, known("@")) {
		return fmt.Errorf("redistest: cluster nodes did not all meet within %s", clusterTimeout)
	}
	for i := range 3 {
		id, err := clients[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("redistest: cluster myid on %s: %w", c.Nodes[i].Addr, err)
		}
		if err := clients[3+i].Do(ctx, "CLUSTER", "REPLICATE", id).Err(); err != nil {
			return fmt.Errorf("redistest: cluster replicate on %s: %w", c.Nodes[3+i].Addr, err)
		}
	}
	ok := WaitFor(ctx, clusterTimeout, func() bool {
		for i, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
			nodes, err := cl.ClusterNodes(ctx).Result()
			if err != nil || strings.Count(nodes, "slave") != 3 {
				return false
			}
			if i >= 3 {
				repl, err := cl.Info(ctx, "replication").Result()
				if err != nil || !strings.Contains(repl, "master_link_status:up") {
					return false
				}
			}
		}
		return true
	})
	if !ok {
		return fmt.Errorf("redistest: cluster did not become healthy within %s", clusterTimeout)
	}
	return nil
}

// Addrs returns every node's address, for a cluster client's seed list.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
	}
	return a
}

// Client returns a go-redis cluster client seeded with every node, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// node returns the Server listening on addr, or nil.
func (c *Cluster) node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// running returns the nodes whose process is up and answering.
func (c *Cluster) running() []*Server {
	var up []*Server
	for _, n := range c.Nodes {
		if n.Running() {
			up = append(up, n)
		}
	}
	return up
}

// MasterOf returns the node a running node names as the master of key's slot.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	ctx := context.Background()
	for _, n := range c.running() {
		m, err := n.slotMaster(ctx, key)
		if err == nil && m != "" {
			if s := c.node(m); s != nil {
				return s
			}
		}
	}
	t.Fatalf("redistest: no running node knows the master of %q", key)
	return nil
}

// ReplicaOf returns the node a running node lists as a replica of master.
func (c *Cluster) ReplicaOf(t testing.TB, master *Server) *Server {
	t.Helper()
	ctx := context.Background()
	mc := master.NewClient()
	defer mc.Close()
	id, err := mc.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatalf("redistest: cluster myid on %s: %v", master.Addr, err)
	}
	nodes, err := mc.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: cluster nodes on %s: %v", master.Addr, err)
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[3] == id && strings.Contains(f[2], "slave") {
			addr, _, _ := strings.Cut(f[1], "@")
			if s := c.node(addr); s != nil {
				return s
			}
		}
	}
	t.Fatalf("redistest: %s has no replica", master.Addr)
	return nil
}

// slotMaster asks s which address is the master of key's slot.
func (s *Server) slotMaster(ctx context.Context, key string) (string, error) {
	cl := s.NewClient()
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", nil
}

// Healthy reports whether every running node says cluster_state:ok and names, as the master of
// key's slot, the same running node.
func (c *Cluster) Healthy(key string) bool {
	ctx := context.Background()
	master := ""
	for _, n := range c.running() {
		cl := n.NewClient()
		info, err := cl.ClusterInfo(ctx).Result()
		cl.Close()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
		m, err := n.slotMaster(ctx, key)
		if err != nil || m == "" || (master != "" && m != master) {
			return false
		}
		master = m
	}
	s := c.node(master)
	return s != nil && s.Running()
}

// WaitHealthy waits until Healthy(key) holds (a failover finished) and returns when it first
// did; it fails the test after 30 s.
func (c *Cluster) WaitHealthy(t testing.TB, key string) time.Time {
	t.Helper()
	if !WaitFor(context.Background(), clusterTimeout, func() bool { return c.Healthy(key) }) {
		t.Fatalf("redistest: cluster not healthy for %q within %s", key, clusterTimeout)
	}
	return time.Now()
}

// Sync makes sure master's replicas hold every write master acknowledged so far: one write on
// master followed by WAIT, so that killing master loses nothing a test already checked.
func Sync(t testing.TB, master *Server, replicas int) {
	t.Helper()
	ctx := context.Background()
	cl := master.NewClient()
	defer cl.Close()
	// WAIT counts the replicas that acknowledged this connection's last write, and with it
	// everything written to master before it. In a cluster the key must hash to master's slots:
	// find one by trying a few.
	for i := range 10000 {
		k := "redistest:sync:" + strconv.Itoa(i)
		err := cl.Set(ctx, k, "1", time.Minute).Err()
		if err != nil && strings.HasPrefix(err.Error(), "MOVED") {
			continue
		}
		if err != nil {
			t.Fatalf("redistest: sync write on %s: %v", master.Addr, err)
		}
		n, err := cl.Wait(ctx, replicas, 5*time.Second).Result()
		if err != nil || n < int64(replicas) {
			t.Fatalf("redistest: WAIT on %s: %d replicas acknowledged (%v), want %d", master.Addr, n, err, replicas)
		}
		return
	}
	t.Fatalf("redistest: no key of %s's slots found", master.Addr)
}
