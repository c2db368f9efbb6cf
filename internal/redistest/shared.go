package redistest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// One redis-server shared by the tests of a package (Main, Shared), so that a package with many
// short Redis tests starts one process instead of one per test. Its tests run one after another
// and use keys of their own; a test that restarts, pauses or kills its server, or reads
// server-wide counters, starts its own with Start.
var shared struct {
	mu  sync.Mutex
	srv *Server
}

// Main is a package's TestMain with a shared redis-server (os.Exit(redistest.Main(m))): it
// starts the server with args, runs the tests and stops it. A missing redis-server fails the
// run, naming the package to install; it never skips.
func Main(m *testing.M, args ...string) int {
	srv, stop, err := StartMain(args...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared.mu.Lock()
	shared.srv = srv
	shared.mu.Unlock()
	defer stop()
	return m.Run()
}

// Shared returns the package's shared server (Main). It fails the test when the package's
// TestMain did not start one.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil {
		t.Fatal("redistest: no shared server: the package's TestMain must call redistest.Main")
	}
	return shared.srv
}

// Fresh returns the package's shared server (Main), emptied for this test (FLUSHALL: the
// package's tests run one after another), and a client closed when the test ends.
func Fresh(t testing.TB) (*Server, *redis.Client) {
	t.Helper()
	srv := Shared(t)
	c := srv.Client(t)
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("redistest: flushall: %v", err)
	}
	return srv, c
}
