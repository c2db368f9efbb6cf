package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRuleErrorLoggedOncePerInterval: a rule comparing a string with a number fails on every one
// of many elements. The log names the expression's file position, the rule, the types and the
// value, once per progress interval (the second line saying how many it held back), and
// flowrun_rule_errors_total counts every failure. A `??` guard on a plain-text element works.
func TestRuleErrorLoggedOncePerInterval(t *testing.T) {
	t.Parallel()
	const n = 200
	e := newRedisEnv(t)
	body := `pipeline "payouts" {
  source "list" {
    key      = "payouts"
    consumer = "w1"
    block    = "100ms"
  }
  rule "text" {
    when    = "(payload.amount ?? 0) == 0"
    outcome = "ack"
  }
  rule "big" {
    when    = "attempt < 2 && payload.amount > 100"
    outcome = "drop"
  }
}
`
	content := fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n\n%s", e.srv.URL, body)
	path := writeFile(t, e.dir, "payouts.hcl", content)
	// Where "payload.amount > 100" starts in the file, 1-based.
	var line, col int
	for i, l := range strings.Split(content, "\n") {
		if c := strings.Index(l, "payload.amount > 100"); c >= 0 {
			line, col = i+1, c+1
		}
	}
	batch := func() {
		els := make([]string, n)
		for i := range els {
			els[i] = fmt.Sprintf(`{"amount":"abc","i":%d}`, i)
		}
		e.lpush("payouts", els...)
	}
	addr := freeAddr(t)
	const interval = 2 * time.Second
	p := start(t, "run", "--http-addr", addr, "--progress-interval", interval.String(), path)
	metric := regexp.MustCompile(`flowrun_rule_errors_total\{pipeline="payouts",rule="big"\} (\d+)`)
	errorsCounted := func() string {
		_, body := httpGet("http://" + addr + "/metrics")
		if m := metric.FindStringSubmatch(body); m != nil {
			return m[1]
		}
		return "0"
	}
	began := time.Now()
	batch()
	e.lpush("payouts", "plain text, not JSON") // the ?? guard: no error, acknowledged
	eventually(t, 20*time.Second, "the first batch counted and settled", func() bool {
		return errorsCounted() == fmt.Sprint(n) && e.llen("payouts") == 0 && e.llen("payouts:processing:w1") == 0
	})
	if time.Since(began) >= interval {
		t.Skipf("the first batch took %s, longer than the interval: nothing to tell apart", time.Since(began))
	}
	// The next interval: one more line for the second batch, saying how many the first held back.
	for time.Since(began) < interval+200*time.Millisecond {
		time.Sleep(50 * time.Millisecond) // the interval itself is what is tested
	}
	batch()
	eventually(t, 20*time.Second, "both batches counted", func() bool { return errorsCounted() == fmt.Sprint(2*n) })
	stop(t, p)

	want := fmt.Sprintf(`%s:%d:%d: rule "big": payload.amount is a string ("abc"), compared with a number`, path, line, col)
	var lines []map[string]any
	for _, l := range strings.Split(p.err.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["level"] != "warn" {
			continue
		}
		if s, _ := m["error"].(string); strings.Contains(s, "payload.amount") {
			lines = append(lines, m)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d warnings about the rule for %d failures, want 2 (one per interval):\n%s", len(lines), 2*n, p.err.String())
	}
	for i, m := range lines {
		if m["error"] != want {
			t.Errorf("warning %d: error %q, want %q", i+1, m["error"], want)
		}
	}
	if s, _ := lines[1]["suppressed"].(float64); int(s) != n-1 {
		t.Errorf("the second warning says %v held back, want %d", lines[1]["suppressed"], n-1)
	}
	if strings.Contains(p.err.String(), "cannot be read") {
		t.Errorf("the plain-text element guarded by ?? failed:\n%s", p.err.String())
	}
}
