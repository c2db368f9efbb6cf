// Package redistest starts throw-away redis-server processes for tests: one per test (Start) or
// one per package from a TestMain (StartMain), a six-node Redis Cluster (StartHACluster), a
// Sentinel set-up (StartSentinel), and a loopback proxy that can lose a reply on purpose
// (StartProxy). Each server listens on a free loopback port, keeps no data on disk and is stopped
// when the test (or the TestMain's cleanup) ends. The machine's own Redis on 6379 is never
// touched.
//
// A missing redis-server fails the test (never skips it), naming the package to install: a
// test run that silently skipped every Redis test would pass on a machine that tested nothing.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// startTimeout bounds how long a fresh redis-server may take to answer PING.
const startTimeout = 10 * time.Second

// stopTimeout is how long Stop waits after SIGTERM before it kills.
const stopTimeout = 5 * time.Second

// Server is one running redis-server.
type Server struct {
	Addr    string // "127.0.0.1:PORT"
	URL     string // "redis://127.0.0.1:PORT/0"
	TLSAddr string // StartTLS only: the TLS port's "127.0.0.1:PORT"

	bin      string
	dir      string
	args     []string
	conf     string // a config file given before the other arguments (Sentinel)
	sentinel bool   // run as redis-server CONF --sentinel

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
	log  string        // path of the server's log file
}

// Start starts a redis-server with extra args (e.g. "--requirepass", "secret"), waits until it
// answers PING and stops it when the test ends. Without redis-server on PATH it fails the test
// with ErrNoServer's message, which says what to install; it never skips.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{bin: bin, dir: t.TempDir(), args: args}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Binary returns the path of redis-server, or an error wrapping ErrNoServer that names the
// package to install.
func Binary() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redistest: %w (%v)", ErrNoServer, err)
	}
	return bin, nil
}

// StartMain is Start for a TestMain, which has no testing.TB: it returns the server and a stop
// function that also removes its directory. A missing redis-server is an error wrapping
// ErrNoServer; the caller fails with it.
func StartMain(args ...string) (*Server, func(), error) {
	bin, err := Binary()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	s := &Server{bin: bin, dir: dir, args: args}
	if err := s.start(); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return s, func() { s.Stop(); os.RemoveAll(dir) }, nil
}

// start launches s (bin, dir, args and the rest set) on a free port.
func (s *Server) start() error {
	// Picking a free port and then binding it is racy with other processes; retry a few times.
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return err
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.URL = "redis://" + s.Addr + "/0"
		if lastErr = s.launch(); lastErr == nil {
			return nil
		}
	}
	return lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts the process on s.Addr and waits for PING. s.mu need not be held by the caller.
func (s *Server) launch() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	s.log = filepath.Join(s.dir, "redis-"+port+".log")
	var argv []string
	if s.conf != "" {
		argv = append(argv, s.conf)
	}
	if s.sentinel {
		argv = append(argv, "--sentinel")
	}
	argv = append(argv, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--logfile", s.log)
	argv = append(argv, s.args...)
	cmd := exec.Command(s.bin, argv...)
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.Now().Add(startTimeout)
	for {
		if ping(s.Addr) {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("redistest: redis-server on %s exited (%v): %s", s.Addr, err, s.tail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redistest: redis-server on %s did not answer PING within %s: %s",
				s.Addr, startTimeout, s.tail())
		}
	}
	done := make(chan struct{})
	go func() { <-exited; close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// ping speaks just enough RESP to tell a listening redis-server from a closed port: no
// go-redis client, so a password-protected server counts as up (it answers -NOAUTH).
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false
	}
	return strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH")
}

func (s *Server) tail() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return "(no log)"
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return strings.TrimSpace(string(b))
}

// Stop ends the server with SIGTERM (killing it if it lingers) and waits for it. Safe to call
// more than once and on a stopped server.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// Kill ends the server with SIGKILL and waits for it, as a crash would.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(stopTimeout):
		cmd.Process.Kill()
		<-done
	}
}

// Restart stops the server (if running) and starts it again on the same port with the same
// arguments. Data does not survive (no persistence), which is what a reconnect test wants.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.RestartErr(); err != nil {
		t.Fatal(err)
	}
}

// RestartErr is Restart for callers without a testing.TB.
func (s *Server) RestartErr() error {
	s.Stop()
	// The port may linger briefly in the kernel; launch retries until the deadline.
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.launch()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client returns a go-redis client for the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := s.NewClient()
	t.Cleanup(func() { c.Close() })
	return c
}

// NewClient returns a go-redis client for the server; the caller closes it. Maintenance
// notifications are off, as on flowrun's own clients (redisconn): in go-redis's auto mode a
// connection whose handshake refuses them rewrites the client's options, racing any reader of
// Options (a source that copies them for a reading client of its own).
func (s *Server) NewClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
}

// Running reports whether the server process is up and answering.
func (s *Server) Running() bool {
	s.mu.Lock()
	up := s.cmd != nil
	s.mu.Unlock()
	return up && ping(s.Addr)
}

// WaitFor polls cond every few milliseconds until it holds or timeout passes; it reports
// whether cond held. Tests use it instead of sleeping.
func WaitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-tick.C:
		}
	}
}

// ErrNoServer is wrapped by the error of StartMain and Binary when redis-server is not on PATH.
var ErrNoServer = errors.New("redis-server not found: apt-get install redis-server")

// StartCluster starts a one-node Redis Cluster owning all 16384 slots: enough for a
// ClusterClient, hash slots, MOVED-free routing and CROSSSLOT errors, without six processes.
func StartCluster(t testing.TB, args ...string) *Server {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "nodes.conf")
	s := Start(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", conf}, args...)...)
	c := s.NewClient()
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("redistest: assign slots: %v", err)
	}
	ok := WaitFor(ctx, startTimeout, func() bool {
		info, err := c.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	if !ok {
		t.Fatal("redistest: cluster did not reach cluster_state:ok")
	}
	return s
}

// ClusterClient returns a go-redis cluster client for a server from StartCluster, closed when
// the test ends.
func (s *Server) ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.Addr}})
	t.Cleanup(func() { c.Close() })
	return c
}
