package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// Reload on SIGHUP (SPEC §10 "Reload") through the binary: the files are validated first and
// a broken one changes nothing; otherwise the removed and changed pipelines drain as on
// SIGTERM, the new and changed ones start, and the unchanged ones never pause.

// reloadPipeline reads the stream IN (group g, consumer w1) and emits payload to OUT.
func reloadPipeline(name, in, out, payload string) string {
	return fmt.Sprintf(`pipeline %q {
  source "stream" {
    stream   = %q
    group    = "g"
    consumer = "w1"
    block    = "100ms"
  }
  concurrency = 2
  rule "copy" {
    when    = "true"
    outcome = "ack"
    emit "stream" {
      key     = %q
      payload = %q
    }
  }
}
`, name, in, out, payload)
}

// payloads returns the payloads of stream key.
func payloads(t *testing.T, rdb *redis.Client, key string) []string {
	t.Helper()
	xs, err := rdb.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprint(x.Values["payload"]))
	}
	return out
}

func xadd(t *testing.T, rdb *redis.Client, key, payload string) {
	t.Helper()
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: key, Values: map[string]any{"payload": payload}}).Err(); err != nil {
		t.Fatal(err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// stoppedLog reports whether pipeline logged "pipeline stopped".
func stoppedLog(stderr, pipeline string) bool {
	return logIndex(stderr, pipeline, "pipeline stopped") >= 0
}

// logIndex returns the number of the first JSON log line of pipeline with message msg, or -1.
func logIndex(stderr, pipeline, msg string) int {
	for i, l := range strings.Split(stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["pipeline"] == pipeline && m["message"] == msg {
			return i
		}
	}
	return -1
}

func TestReloadOnSIGHUP(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	dir := t.TempDir()
	marks := t.TempDir()
	writeFile(t, dir, "a_redis.hcl", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n", srv.URL))
	writeFile(t, dir, "keep.hcl", reloadPipeline("keep", "k_in", "k_out", "'k:' + string(payload)"))
	writeFile(t, dir, "change.hcl", reloadPipeline("change", "c_in", "c_out", "'v1:' + string(payload)"))
	// gone's handler is a process that takes 2 s: the reload that removes it finds it in flight.
	writeFile(t, dir, "gone.hcl", fmt.Sprintf(`pipeline "gone" {
  source "stream" {
    stream   = "g_in"
    group    = "g"
    consumer = "w1"
    block    = "100ms"
  }
  handler "exec" {
    command = ["/bin/sh", "-c", "touch %[1]s/started; sleep 2; touch %[1]s/finished"]
  }
}
`, marks))

	addr := freeAddr(t)
	metrics := func() string { _, body := httpGet("http://" + addr + "/metrics"); return body }
	// held holds a runtime delayed copy for an hour: the reload that removes it writes it.
	writeFile(t, dir, "held.hcl", `pipeline "held" {
  source "stream" {
    stream   = "h_in"
    group    = "g"
    consumer = "w1"
    block    = "100ms"
  }
  rule "later" {
    when    = "true"
    outcome = "retry_after('1h')"
  }
}
`)
	p := start(t, "run", "--log-format", "json", "--http-addr", addr, dir)
	eventually(t, 10*time.Second, "the first gauges", func() bool {
		return strings.Contains(metrics(), `flowrun_source_pending{pipeline="gone"}`)
	})
	xadd(t, rdb, "k_in", "1")
	xadd(t, rdb, "c_in", "1")
	eventually(t, 10*time.Second, "both pipelines handle", func() bool {
		return contains(payloads(t, rdb, "k_out"), "k:1") && contains(payloads(t, rdb, "c_out"), "v1:1")
	})
	xadd(t, rdb, "h_in", "later")
	eventually(t, 10*time.Second, "held's copy held (its original acknowledged)", func() bool {
		return pendingCount(t, rdb, "h_in", "g") == 0 && len(payloads(t, rdb, "h_in")) == 1 &&
			strings.Contains(metrics(), `flowrun_delayed_held{pipeline="held"} 1`)
	})
	xadd(t, rdb, "g_in", "job")
	eventually(t, 10*time.Second, "gone's handler started", func() bool {
		_, err := os.Stat(filepath.Join(marks, "started"))
		return err == nil
	})

	// Change one, remove one, add one; then SIGHUP while gone's handler runs.
	writeFile(t, dir, "change.hcl", "# now v2\n"+reloadPipeline("change", "c_in", "c_out", "'v2:' + string(payload)"))
	for _, f := range []string{"gone.hcl", "held.hcl"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, dir, "fresh.hcl", reloadPipeline("fresh", "n_in", "n_out", "'n:' + string(payload)"))
	// keep.hcl rewritten with only a comment and layout changed: still the same pipeline.
	writeFile(t, dir, "keep.hcl", "// the same pipeline\n\n"+reloadPipeline("keep", "k_in", "k_out", "'k:' + string(payload)"))
	p.signal(syscall.SIGHUP)

	// The unchanged pipeline keeps handling while the removed one drains.
	xadd(t, rdb, "k_in", "2")
	eventually(t, 5*time.Second, "keep handles an entry added during the reload", func() bool {
		return contains(payloads(t, rdb, "k_out"), "k:2")
	})
	if strings.Contains(p.err.String(), `"reloaded"`) {
		t.Errorf("the reload finished before keep handled an entry added while gone drained; cannot tell keep did not pause")
	}

	eventually(t, 10*time.Second, "the reload", func() bool { return strings.Contains(p.err.String(), `"message":"reloaded"`) })
	stderr := p.err.String()
	if _, err := os.Stat(filepath.Join(marks, "finished")); err != nil {
		t.Errorf("gone's in-flight handler did not finish before the reload ended: %v", err)
	}
	if n := pendingCount(t, rdb, "g_in", "g"); n != 0 {
		t.Errorf("gone: XPENDING %d after the reload, want 0 (its in-flight entry settled)", n)
	}
	if !stoppedLog(stderr, "gone") || !stoppedLog(stderr, "change") || !stoppedLog(stderr, "held") {
		t.Errorf("want \"pipeline stopped\" for gone, held and change:\n%s", stderr)
	}
	if got := payloads(t, rdb, "h_in"); len(got) != 2 || got[1] != "later" || pendingCount(t, rdb, "h_in", "g") != 0 {
		t.Errorf("h_in %v: want the held copy written by the reload that removed held, nothing pending", got)
	}
	// fresh and change need nothing gone has: they start while gone still drains.
	goneStopped := logIndex(stderr, "gone", "pipeline stopped")
	for _, name := range []string{"fresh", "change"} {
		if i := logIndex(stderr, name, "pipeline started"); i < 0 || i > goneStopped {
			t.Errorf("%s did not start before gone had drained (lines %d, %d):\n%s", name, i, goneStopped, stderr)
		}
	}
	// Gauges of a removed pipeline go (its counters stay, as counters do).
	m := metrics()
	for _, g := range []string{"flowrun_source_pending", "flowrun_source_lag", "flowrun_inflight", "flowrun_delayed_held"} {
		for _, removed := range []string{"gone", "held"} {
			if strings.Contains(m, g+`{pipeline="`+removed+`"}`) {
				t.Errorf("%s of the removed pipeline %s is still reported:\n%s", g, removed, grepLines(m, "pipeline="))
			}
		}
	}
	if !strings.Contains(m, `flowrun_source_pending{pipeline="keep"}`) {
		t.Errorf("keep's gauges went too:\n%s", grepLines(m, "pipeline="))
	}
	if stoppedLog(stderr, "keep") {
		t.Errorf("keep was stopped by a reload that did not change it:\n%s", stderr)
	}
	if !strings.Contains(stderr, `"added":["fresh"],"changed":["change"],"removed":["gone","held"],"kept":["keep"]`) {
		t.Errorf("the reload line does not say what it did:\n%s", stderr)
	}

	xadd(t, rdb, "c_in", "2")
	xadd(t, rdb, "n_in", "1")
	xadd(t, rdb, "k_in", "3")
	eventually(t, 10*time.Second, "the changed pipeline's new rule and the new pipeline", func() bool {
		return contains(payloads(t, rdb, "c_out"), "v2:2") && contains(payloads(t, rdb, "n_out"), "n:1") &&
			contains(payloads(t, rdb, "k_out"), "k:3")
	})
	if got := payloads(t, rdb, "c_out"); contains(got, "v1:2") {
		t.Errorf("c_out %v: the old rule still ran after the reload", got)
	}

	// A broken file: diagnostics logged, nothing touched.
	writeFile(t, dir, "zz_broken.hcl", "pipeline \"broken\" {\n  source \"stream\" {\n")
	writeFile(t, dir, "change.hcl", reloadPipeline("change", "c_in", "c_out", "'v3:' + string(payload)"))
	p.signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "the failed reload", func() bool {
		return strings.Contains(p.err.String(), "reload failed; running pipelines untouched")
	})
	stderr = p.err.String()
	if !strings.Contains(stderr, filepath.Join(dir, "zz_broken.hcl")+":") || !strings.Contains(stderr, `"level":"error"`) {
		t.Errorf("the diagnostics are not logged with FILE:LINE:COL:\n%s", stderr)
	}
	if strings.Count(stderr, `"pipeline stopped"`) != 3 {
		t.Errorf("a failed reload stopped a pipeline:\n%s", stderr)
	}
	xadd(t, rdb, "c_in", "3")
	xadd(t, rdb, "k_in", "4")
	xadd(t, rdb, "n_in", "2")
	eventually(t, 10*time.Second, "every pipeline still running after the failed reload", func() bool {
		return contains(payloads(t, rdb, "c_out"), "v2:3") && contains(payloads(t, rdb, "k_out"), "k:4") &&
			contains(payloads(t, rdb, "n_out"), "n:2")
	})

	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM; stderr:\n%s", code, p.err.String())
	}
	for _, s := range []string{"k_in", "c_in", "n_in", "g_in", "h_in"} {
		if n := pendingCount(t, rdb, s, "g"); n != 0 {
			t.Errorf("%s: XPENDING %d at the end", s, n)
		}
	}
}

// TestReloadRedisBlockChanged moves a pipeline to another server by editing its redis block:
// the restarted pipeline reads and emits through a new client, the old one is closed.
func TestReloadRedisBlockChanged(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ra, rb := a.Client(t), b.Client(t)
	dir := t.TempDir()
	redisFile := func(url string) {
		writeFile(t, dir, "a_redis.hcl", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n", url))
	}
	redisFile(a.URL)
	writeFile(t, dir, "p.hcl", reloadPipeline("p", "in", "out", "string(payload)"))
	p := start(t, "run", "--log-format", "json", dir)
	xadd(t, ra, "in", "on-a")
	eventually(t, 10*time.Second, "p handles on a", func() bool { return contains(payloads(t, ra, "out"), "on-a") })

	redisFile(b.URL)
	p.signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "the reload", func() bool { return strings.Contains(p.err.String(), `"message":"reloaded"`) })
	if !strings.Contains(p.err.String(), `"changed":["p"]`) || !strings.Contains(p.err.String(), `"redis":"main"`) {
		t.Errorf("want p changed and main's client closed:\n%s", p.err.String())
	}
	xadd(t, rb, "in", "on-b")
	eventually(t, 10*time.Second, "p handles on b", func() bool { return contains(payloads(t, rb, "out"), "on-b") })
	xadd(t, ra, "in", "late-a")
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := payloads(t, ra, "out"); contains(got, "late-a") {
		t.Errorf("a is still read after the redis block moved to b: %v", got)
	}
}

func pendingCount(t *testing.T, rdb *redis.Client, stream, group string) int64 {
	t.Helper()
	p, err := rdb.XPending(context.Background(), stream, group).Result()
	if err != nil {
		t.Fatalf("xpending %s %s: %v", stream, group, err)
	}
	return p.Count
}

// A pipeline that reads standard input is never restarted by a reload: its reader has read
// ahead, and a new run would lose those lines. Its change waits for the next start.
func TestReloadKeepsStdinPipeline(t *testing.T) {
	dir := t.TempDir()
	pipe := func(tag string) string {
		return fmt.Sprintf(`pipeline "stdin" {
  source "pipe" {}
  out_retry = "retry"
  rule "tag" {
    when    = "true"
    outcome = "ack"
    emit "record" {
      key     = %q
      payload = "payload"
    }
  }
}
`, tag)
	}
	cfg := writeFile(t, dir, "flow.hcl", pipe("v1"))
	p := start(t, "run", "--log-format", "json", cfg)
	io.WriteString(p.stdin, `{"key":"in","payload":"a"}`+"\n")
	eventually(t, 10*time.Second, "the first record", func() bool { return strings.Contains(p.out.String(), `"key":"v1"`) })
	writeFile(t, dir, "flow.hcl", pipe("v2"))
	p.signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "the reload", func() bool { return strings.Contains(p.err.String(), `"message":"reloaded"`) })
	if !strings.Contains(p.err.String(), "is not restarted by a reload") || stoppedLog(p.err.String(), "stdin") {
		t.Errorf("want the stdin pipeline kept, with a warning:\n%s", p.err.String())
	}
	io.WriteString(p.stdin, `{"key":"in","payload":"b"}`+"\n")
	p.stdin.Close()
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := p.out.String(); strings.Count(got, `"key":"v1"`) != 2 || strings.Contains(got, "v2") {
		t.Errorf("stdout %q: want both records through the running pipeline, none lost", got)
	}
}
