package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Soak lengths: the whole run, and the warm-up before samples count.
const (
	soakFor    = 45 * time.Second
	soakWarmup = 12 * time.Second
	soakEvery  = 2 * time.Second
	soakRate   = 400 // entries a second
)

// TestSoakNoSlowLeak (issue 26): 45 s at a steady 400 entries a second with retries, runtime
// delays and dead letters. After a warm-up, the goroutines (go_goroutines from /metrics) and the
// resident memory (VmRSS) stay flat: a slow leak of a goroutine or a few hundred bytes per
// message would show. Longer runs (150 s at 2,000 msg/s: RSS about 42 MiB, 33–34 goroutines)
// were measured by hand; this one keeps the e2e suite short.
func TestSoakNoSlowLeak(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	cfg := e.streamConfig(streamPipeline("stream", "", "  concurrency  = 4\n  max_attempts = 3\n  dead_letter  = \"jobs.dlq\"\n", `
  rule "dead" {
    when    = "payload.k == 'dead'"
    outcome = "retry"
  }
  rule "again" {
    when    = "payload.k == 'again' && attempt < 2"
    outcome = "retry"
  }
  rule "later" {
    when    = "payload.k == 'later' && attempt < 2"
    outcome = "retry_after('200ms')"
  }
  rule "done" {
    emit "stream" {
      key = "jobs.done"
    }
    outcome = "ack"
  }
`))
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	pid := p.cmd.Process.Pid

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var sent, dead atomic.Int64
	produced := make(chan struct{})
	go func() { // a steady producer: soakRate/100 entries every 10 ms
		defer close(produced)
		kinds := []string{"ok", "ok", "ok", "ok", "ok", "ok", "again", "later", "dead", "ok"}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pipe := e.rdb.Pipeline()
			for range soakRate / 100 {
				n := sent.Add(1)
				k := kinds[n%int64(len(kinds))]
				if k == "dead" {
					dead.Add(1)
				}
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"payload", fmt.Sprintf(`{"n":%d,"k":%q}`, n, k)}})
			}
			pipe.Exec(ctx)
		}
	}()

	goroutines := regexp.MustCompile(`(?m)^go_goroutines (\d+)`)
	var gs, rss []int
	began := time.Now()
	for time.Since(began) < soakFor {
		time.Sleep(soakEvery)
		if time.Since(began) < soakWarmup {
			continue
		}
		_, body := httpGet("http://" + addr + "/metrics")
		m := goroutines.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no go_goroutines in /metrics")
		}
		g, _ := strconv.Atoi(m[1])
		gs, rss = append(gs, g), append(rss, vmRSS(t, pid))
	}
	stop()
	<-produced
	total := sent.Load()
	eventually(t, 30*time.Second, "every entry emitted or dead-lettered, nothing pending", func() bool {
		return e.streamXLen("jobs.done") == total-dead.Load() && e.streamXLen("jobs.dlq") == dead.Load() &&
			e.streamPendingCount() == 0
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	t.Logf("%d entries (%d dead letters) in %v; after warm-up, goroutines %v, RSS KiB %v", total, dead.Load(), soakFor, gs, rss)

	if len(gs) < 8 {
		t.Fatalf("%d samples after the warm-up, want at least 8", len(gs))
	}
	if lo, hi := slices.Min(gs), slices.Max(gs); hi > lo+10 {
		t.Errorf("goroutines went from %d to %d: not flat (%v)", lo, hi, gs)
	}
	// Resident memory: the median of the last four samples against that of the first four,
	// with room for the collector's rhythm (GOGC=400) and the machine's noise.
	first, last := median(rss[:4]), median(rss[len(rss)-4:])
	if last > first+first/4+4096 {
		t.Errorf("RSS grew from %d KiB to %d KiB after the warm-up: not flat (%v)", first, last, rss)
	}
}

// vmRSS returns a process's resident set size in KiB (/proc/PID/status).
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

func median(xs []int) int {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
