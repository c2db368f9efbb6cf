package cli

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
)

// silentServer accepts connections and never answers: a Redis whose first ping takes the full
// timeout. It reports each accepted connection on accepted; stop closes it and them.
func silentServer(t *testing.T) (addr string, accepted <-chan struct{}, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 16)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	stop = func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
	t.Cleanup(stop)
	return ln.Addr().String(), ch, stop
}

func loadConfig(t *testing.T, src string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := config.Load([]string{path}, config.Options{Hostname: "h"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return cfg
}

// A slow first connection to one redis block does not hold up a client, or a sink, of another.
func TestWiringSlowRedisDoesNotStallOthers(t *testing.T) {
	slowAddr, accepted, stopSlow := silentServer(t)
	fast := redistest.Start(t)
	cfg := loadConfig(t, fmt.Sprintf(`
redis "slow" {
  url = "redis://%s/0"
}
redis "fast" {
  url = %q
}
pipeline "p" {
  source "pipe" {}
  out_retry = "r"
  rule "r" {
    emit "stream" {
      redis = "slow"
      key   = "a"
    }
    emit "stream" {
      redis = "fast"
      key   = "b"
    }
    outcome = "ack"
  }
}
`, slowAddr, fast.URL))
	w := newWiring(cfg, Stdio{In: bytes.NewReader(nil), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}}, zerolog.Nop())
	defer w.close()

	slowDone := make(chan error, 2)
	for range 2 { // two callers of the slow block: one opens it, the other waits for that
		go func() {
			_, err := w.sink(engine.Target{Kind: "stream", Redis: "slow"})
			slowDone <- err
		}()
	}
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the slow block was never dialled")
	}

	start := time.Now()
	if _, err := w.sink(engine.Target{Kind: "stream", Redis: "fast"}); err != nil {
		t.Fatalf("fast sink: %v", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("the fast block's sink took %v: it waited for the slow block", el)
	}
	stopSlow() // the slow block's ping fails now, and its callers return
	for range 2 {
		select {
		case err := <-slowDone:
			if err != nil { // unreachable is not an error at start: sources wait for it
				t.Fatalf("slow sink: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the slow block's sink never returned")
		}
	}
	w.mu.Lock()
	n := len(w.closers)
	w.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d closers, want one client per block", n)
	}
	c1, _ := w.client("slow")
	c2, _ := w.client("slow")
	if c1 != c2 {
		t.Fatal("two clients for one block")
	}
}
