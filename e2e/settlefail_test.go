package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// One key that can never be written never stalls a pipeline (SPEC §10 "Settlement failures"):
// the dead-letter key holds a string, so every dead letter fails with WRONGTYPE. Those
// deliveries stay pending, logged at error once with the command, the key and Redis's own text,
// and counted in flowrun_settle_failures_total, while every other delivery is settled — also
// those in the same batch — and the pipeline keeps going.
func TestUnwritableDeadLetterNeverStallsThePipeline(t *testing.T) {
	e := newStreamEnv(t)
	e.rdb.Set(e.ctx, "jobs.dlq", "not a stream", 0)
	const n = 200
	cfg := e.streamConfig(streamPipeline("stream", "    batch = 50\n", "  concurrency = 4\n  max_attempts = 1\n  dead_letter = \"jobs.dlq\"\n", `
  rule "bad" {
    when    = "headers['bad'] == 'yes'"
    outcome = "retry"
  }
  rule "ok" {
    emit "stream" {
      key = "done"
    }
    outcome = "ack"
  }
`))
	// max_attempts 1: every retry becomes a dead letter, which cannot be written.
	add := func(i int) {
		bad := "no"
		if i%10 == 0 {
			bad = "yes"
		}
		e.streamXAdd("jobs", "bad", bad, "payload", fmt.Sprintf(`{"n":%d}`, i))
	}
	for i := 1; i <= n/2; i++ {
		add(i)
	}
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	// The pipeline keeps going: a second wave after the failures is settled as well.
	eventually(t, streamDeadline, "the first wave to be handled", func() bool { return e.streamXLen("done") == n/2-n/20 })
	for i := n/2 + 1; i <= n; i++ {
		add(i)
	}
	eventually(t, streamDeadline, "the second wave to be handled", func() bool { return e.streamXLen("done") == n-n/10 })
	eventually(t, streamDeadline, "only the unwritable dead letters to stay pending", func() bool {
		return e.streamPendingCount() == n/10
	})
	for _, x := range e.streamPending() {
		// Every one left pending is one whose dead letter failed.
		msgs := e.rdb.XRange(e.ctx, "jobs", x.ID, x.ID).Val()
		if len(msgs) != 1 || streamField(msgs[0], "bad") != "yes" {
			t.Errorf("pending %s is not a dead letter: %v", x.ID, msgs)
		}
	}
	logs := reportsPermanentFault(t, p, addr, n, "settlement failed permanently", `"command":"xadd"`, `"key":"jobs.dlq"`)
	if strings.Contains(logs, "EXECABORT") {
		t.Errorf("log blames EXECABORT:\n%s", logs)
	}
}

// reportsPermanentFault checks how a run of n messages, a tenth of which need a key holding
// the wrong type, reports it: at least n/10 wrongtype settle failures in /metrics and, after a
// clean stop, one error line saying msg, with each of wants and Redis's WRONGTYPE. It returns
// the whole log.
func reportsPermanentFault(t *testing.T, p *proc, addr string, n int, msg string, wants ...string) string {
	t.Helper()
	_, metrics := httpGet("http://" + addr + "/metrics")
	m := regexp.MustCompile(`flowrun_settle_failures_total\{pipeline="jobs",reason="wrongtype"\} (\d+)`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("no wrongtype settle failures in /metrics:\n%s", grepLines(metrics, "settle"))
	}
	if got, _ := strconv.Atoi(m[1]); got < n/10 {
		t.Errorf("settle failures counted %d, want at least %d", got, n/10)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	logs := p.err.String()
	lines := grepLines(logs, msg)
	if c := strings.Count(lines, `"level":"error"`); c != 1 {
		t.Errorf("logged at error %d times, want once per pipeline, command, key and reason:\n%s", c, lines)
	}
	for _, want := range append(wants, "WRONGTYPE Operation against a key holding the wrong kind of value") {
		if !strings.Contains(lines, want) {
			t.Errorf("error log lacks %s:\n%s", want, lines)
		}
	}
	return logs
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// max_held bounds the runtime delayed copies held at once (SPEC §5): with every message asking
// for a delay, reading pauses at the bound, flowrun_delayed_held never exceeds it by more than
// one batch, and every copy is written once it comes due.
func TestMaxHeldBoundsHeldCopies(t *testing.T) {
	e := newStreamEnv(t)
	const n, maxHeld, batch = 300, 40, 10
	cfg := e.streamConfig(streamPipeline("stream", fmt.Sprintf("    batch = %d\n", batch),
		fmt.Sprintf("  concurrency = 4\n  max_held = %d\n", maxHeld), `
  rule "later" {
    when    = "attempt == 1"
    outcome = "retry_after('300ms')"
  }
  rule "ok" {
    emit "stream" {
      key = "done"
    }
    outcome = "ack"
  }
`))
	for i := 0; i < n; i++ {
		e.streamXAdd("jobs", "payload", strconv.Itoa(i))
	}
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	held := regexp.MustCompile(`flowrun_delayed_held\{pipeline="jobs"\} (\d+)`)
	peak := 0
	eventually(t, 60*time.Second, "every copy handled", func() bool {
		_, m := httpGet("http://" + addr + "/metrics")
		if x := held.FindStringSubmatch(m); x != nil {
			v, _ := strconv.Atoi(x[1])
			peak = max(peak, v)
		}
		return e.streamXLen("done") == n
	})
	t.Logf("peak flowrun_delayed_held %d with max_held %d", peak, maxHeld)
	if peak > maxHeld+batch {
		t.Errorf("held %d copies at once, max_held is %d (+ one batch of %d)", peak, maxHeld, batch)
	}
	if peak < maxHeld/2 {
		t.Errorf("peak held %d: the bound was never approached, the test proves nothing", peak)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// A flow-control key that can never be written stalls only the deliveries that need it (SPEC
// §13, SPEC §10 "Settlement failures"): the concurrency key of "bad" holds a string, so its
// admissions fail with WRONGTYPE. They count as retry (max_attempts 1: a dead letter, nothing
// lost), logged at error once with the command, the key and Redis's own text, and counted in
// flowrun_settle_failures_total; every other key goes on being admitted, handled and acked.
func TestFlowUnwritableKeyNeverStallsThePipeline(t *testing.T) {
	e := newStreamEnv(t)
	e.rdb.Set(e.ctx, "flowrun:{jobs}:c:bad", "not a sorted set", 0)
	const n = 60
	cfg := e.streamConfig(streamPipeline("stream", "    batch = 20\n", `  concurrency = 4
  max_attempts = 1
  dead_letter = "jobs.dlq"
  concurrency_key {
    key   = "headers['k']"
    limit = 1
  }
`, `
  rule "ok" {
    emit "stream" {
      key = "done"
    }
    outcome = "ack"
  }
`))
	for i := 1; i <= n; i++ {
		k := "good-" + strconv.Itoa(i%5)
		if i%10 == 0 {
			k = "bad"
		}
		e.streamXAdd("jobs", "k", k, "payload", fmt.Sprintf(`{"n":%d}`, i))
	}
	addr := freeAddr(t)
	p := start(t, "run", "--http-addr", addr, cfg)
	eventually(t, streamDeadline, "good keys handled, bad ones dead-lettered, nothing pending", func() bool {
		return e.streamXLen("done") == n-n/10 && e.streamXLen("jobs.dlq") == n/10 && e.streamPendingCount() == 0
	})
	for _, m := range e.rdb.XRange(e.ctx, "jobs.dlq", "-", "+").Val() {
		if streamField(m, "k") != "bad" {
			t.Errorf("dead letter of key %q", streamField(m, "k"))
		}
	}
	logs := reportsPermanentFault(t, p, addr, n, "admission failed permanently", `"command":"evalsha"`, `"key":"flowrun:{jobs}:c:bad"`)
	if strings.Contains(logs, "store round failed") {
		t.Errorf("a permanent fault failed whole rounds:\n%s", grepLines(logs, "store round failed"))
	}
	// The key that could not be written is left as it was.
	if v := e.rdb.Get(e.ctx, "flowrun:{jobs}:c:bad").Val(); v != "not a sorted set" {
		t.Errorf("bad key now %q", v)
	}
}
