package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHealthReadinessAndMetrics starts flowrun while its Redis is down: /healthz answers, /readyz
// says 503 until Redis comes up, then the backlog is handled and counted in /metrics.
func TestHealthReadinessAndMetrics(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "ops.hcl", fmt.Sprintf(`redis "main" {
  url = %q
}

pipeline "ops" {
  source "stream" {
    stream = "ops"
    block  = "100ms"
  }
  rule "ok" {
    outcome = "ack"
  }
}
`, srv.URL))
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	eventually(t, 10*time.Second, "/healthz", func() bool {
		code, _ := httpGet("http://" + addr + "/healthz")
		return code == http.StatusOK
	})
	if code, _ := httpGet("http://" + addr + "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d while Redis is down, want 503", code)
	}

	srv.Restart(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for i := range 5 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "ops", Values: []string{"payload", fmt.Sprint(i)}})
	}
	eventually(t, 15*time.Second, "/readyz after Redis came up", func() bool {
		code, _ := httpGet("http://" + addr + "/readyz")
		return code == http.StatusOK
	})
	want := `flowrun_messages_total{outcome="ack",pipeline="ops"} 5`
	eventually(t, 10*time.Second, "the backlog counted in /metrics", func() bool {
		_, body := httpGet("http://" + addr + "/metrics")
		return strings.Contains(body, want)
	})
	_, body := httpGet("http://" + addr + "/metrics")
	for _, name := range []string{"flowrun_handler_seconds_bucket", "flowrun_inflight", "flowrun_delayed_held", "flowrun_dead_letters_total", "flowrun_source_errors_total",
		`flowrun_build_info{goversion="go`, "go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes"} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Count(p.err.String(), "redis stream read") > 4 {
		t.Errorf("the outage is logged per attempt, not per state change:\n%s", p.err.String())
	}
}
