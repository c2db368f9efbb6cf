package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// Through the binary, the progress lines, the status page's /api/status and /metrics read one
// set of counters: every progress line's handled is the sum of its outcomes, and once the
// pipeline is idle all three say the same, to the message.
func TestProgressStatusAndMetricsAgree(t *testing.T) {
	const n = 3000
	srv := redistest.Start(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "count.hcl", fmt.Sprintf(`redis "main" {
  url = %q
}

pipeline "count" {
  source "stream" {
    stream = "count.in"
    group  = "g"
  }
  max_attempts = 1
  dead_letter  = "count.dlq"
  rule "bad" {
    when    = "int(payload.n) %% 100 == 0"
    outcome = "retry"
  }
  rule "even" {
    when    = "int(payload.n) %% 2 == 0"
    outcome = "drop"
  }
  rule "ok" { outcome = "ack" }
}
`, srv.URL))
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, "--progress-interval", "5ms", cfg)
	rdb := srv.Client(t)
	pipe := rdb.Pipeline()
	for i := 1; i <= n; i++ {
		pipe.XAdd(context.Background(), &redis.XAddArgs{Stream: "count.in", Values: map[string]any{"payload": fmt.Sprintf(`{"n":%d}`, i)}})
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}

	var last map[string]int64
	eventually(t, 30*time.Second, fmt.Sprintf("a progress line with %d handled", n), func() bool {
		var handled int64
		handled, last = lastProgressLine(t, p.err.String())
		return handled == n
	})
	want := map[string]int64{"ack": n / 2, "drop": n/2 - n/100, "dead_letter": n / 100}
	for l, c := range want {
		if last[l] != c {
			t.Errorf("progress line: %s %d, want %d (%v)", l, last[l], c, last)
		}
	}

	_, body := httpGet("http://" + addr + "/api/status")
	var st struct {
		Pipelines []struct {
			Name   string           `json:"name"`
			Totals map[string]int64 `json:"totals"`
		} `json:"pipelines"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || len(st.Pipelines) != 1 {
		t.Fatalf("/api/status: %v\n%s", err, body)
	}
	_, metrics := httpGet("http://" + addr + "/metrics")
	for _, l := range []string{"ack", "drop", "retry", "retry_after", "dead_letter", "rejected", "duplicate"} {
		m := regexp.MustCompile(fmt.Sprintf(`(?m)^flowrun_messages_total\{outcome="%s",pipeline="count"\} (\d+)$`, l)).FindStringSubmatch(metrics)
		if m == nil {
			t.Fatalf("/metrics has no %s count:\n%s", l, grepLines(metrics, "flowrun_messages_total"))
		}
		scraped, _ := strconv.ParseInt(m[1], 10, 64)
		if scraped != last[l] || st.Pipelines[0].Totals[l] != last[l] {
			t.Errorf("%s: progress %d, /api/status %d, /metrics %d", l, last[l], st.Pipelines[0].Totals[l], scraped)
		}
	}
	if !strings.Contains(metrics, fmt.Sprintf(`flowrun_dead_letters_total{pipeline="count"} %d`, n/100)) {
		t.Errorf("/metrics: %s", grepLines(metrics, "flowrun_dead_letters_total"))
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// lastProgressLine returns the handled count and outcomes of the last progress line in stderr,
// and fails the test on a line whose outcomes do not sum to its handled.
func lastProgressLine(t *testing.T, stderr string) (int64, map[string]int64) {
	t.Helper()
	var handled int64
	var outcomes map[string]int64
	for _, line := range strings.Split(stderr, "\n") {
		var l struct {
			Message  string           `json:"message"`
			Handled  int64            `json:"handled"`
			Outcomes map[string]int64 `json:"outcomes"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Message != "progress" {
			continue
		}
		var sum int64
		for _, c := range l.Outcomes {
			sum += c
		}
		if sum != l.Handled {
			t.Fatalf("progress line: outcomes %v sum to %d, handled %d", l.Outcomes, sum, l.Handled)
		}
		handled, outcomes = l.Handled, l.Outcomes
	}
	return handled, outcomes
}
