package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// SPEC §13 across processes: two flowrun processes share one consumer group and the flow-control
// state in Redis, standalone and Cluster. The handler is an exec of a shell that appends
// "start"/"end" lines with nanosecond times to a log, so the test sees every handler's span.

// flowTarget is a Redis to run against: its redis block and a client.
type flowTarget struct {
	name  string
	block string
	c     redis.UniversalClient
}

func flowTargets(t *testing.T) []flowTarget {
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	return []flowTarget{
		{"standalone", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n", "redis://"+srv.Addr+"/0"), srv.Client(t)},
		{"cluster", fmt.Sprintf("redis \"main\" {\n  cluster = [%q]\n}\n", cl.Addr), cl.ClusterClient(t)},
	}
}

// flowPipeline is a stream pipeline named name whose handler logs its span to logPath and
// sleeps sleep; blocks are the flow-control blocks.
func flowPipeline(target flowTarget, name, stream, logPath, sleep, blocks string) string {
	script := fmt.Sprintf(`echo "start $FLOWRUN_HEADER_K $(date +%%s%%N) $PPID" >> %s; sleep %s; echo "end $FLOWRUN_HEADER_K $(date +%%s%%N) $PPID" >> %s`, logPath, sleep, logPath)
	return fmt.Sprintf(`%s
pipeline %q {
  source "stream" {
    stream = %q
    batch  = 2
    block  = "100ms"
  }
  concurrency = 4
%s
  handler "exec" {
    command = ["/bin/sh", "-c", %q]
  }
}
`, target.block, name, stream, blocks, script)
}

type span struct {
	key        string
	start, end int64
	pid        string
}

// spans reads the handler log: one span per start line, ended by the next end line of the same
// process and key.
func spans(t *testing.T, path string) []span {
	t.Helper()
	var out []span
	open := map[string][]int{}
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, path)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		ns, _ := strconv.ParseInt(f[2], 10, 64)
		id := f[1] + " " + f[3]
		switch f[0] {
		case "start":
			open[id] = append(open[id], len(out))
			out = append(out, span{key: f[1], start: ns, pid: f[3]})
		case "end":
			if q := open[id]; len(q) > 0 {
				out[q[0]].end = ns
				open[id] = q[1:]
			}
		}
	}
	return out
}

func addKeyed(t *testing.T, c redis.UniversalClient, stream string, keys ...string) {
	t.Helper()
	ctx := context.Background()
	for i, k := range keys {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"k", k, "payload", strconv.Itoa(i)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// drained waits until the group has read and acknowledged every entry of the stream.
func drained(t *testing.T, c redis.UniversalClient, stream string, n int) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 30*time.Second, "every entry handled and acknowledged", func() bool {
		gs, err := c.XInfoGroups(ctx, stream).Result()
		if err != nil || len(gs) != 1 {
			return false
		}
		return gs[0].Pending == 0 && gs[0].EntriesRead == int64(n)
	})
}

func twoProcesses(t *testing.T, cfg string) (*proc, *proc) {
	a := start(t, "run", "--consumer", "w1", "--log-level", "debug", cfg)
	b := start(t, "run", "--consumer", "w2", "--log-level", "debug", cfg)
	return a, b
}

func stopBoth(t *testing.T, ps ...*proc) {
	for _, p := range ps {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range ps {
		if code := p.wait(20 * time.Second); code != 0 {
			t.Fatalf("exit %d", code)
		}
	}
}

func TestFlowConcurrencyKeyAcrossProcesses(t *testing.T) {
	for _, tg := range flowTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "spans.log")
			cfg := writeFile(t, dir, "flow.hcl", flowPipeline(tg, "conc", "conc.in", logPath, "0.03", `  concurrency_key {
    key   = "headers['k']"
    limit = 1
  }`))
			var keys []string
			for i := range 24 {
				keys = append(keys, fmt.Sprintf("k%d", i%3))
			}
			addKeyed(t, tg.c, "conc.in", keys...)
			a, b := twoProcesses(t, cfg)
			drained(t, tg.c, "conc.in", len(keys))
			stopBoth(t, a, b)

			ss := spans(t, logPath)
			if len(ss) != len(keys) {
				t.Fatalf("%d handler runs, want %d", len(ss), len(keys))
			}
			pids := map[string]bool{}
			byKey := map[string][]span{}
			for _, s := range ss {
				pids[s.pid] = true
				byKey[s.key] = append(byKey[s.key], s)
			}
			if len(pids) != 2 {
				t.Fatalf("handlers ran in %d processes, want both", len(pids))
			}
			for k, list := range byKey {
				sort.Slice(list, func(i, j int) bool { return list[i].start < list[j].start })
				for i := 1; i < len(list); i++ {
					if list[i].start < list[i-1].end {
						t.Fatalf("key %s: two handlers overlapped: %+v and %+v", k, list[i-1], list[i])
					}
				}
			}
			// Nothing is left behind but keys with an expiry.
			assertFlowKeysExpire(t, tg.c, "conc")
		})
	}
}

func TestFlowThrottleAcrossProcesses(t *testing.T) {
	for _, tg := range flowTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "spans.log")
			cfg := writeFile(t, dir, "flow.hcl", flowPipeline(tg, "thr", "thr.in", logPath, "0", `  throttle {
    limit  = 4
    period = "500ms"
  }`))
			keys := make([]string, 16)
			for i := range keys {
				keys[i] = "x" + strconv.Itoa(i)
			}
			addKeyed(t, tg.c, "thr.in", keys...)
			begin := time.Now()
			a, b := twoProcesses(t, cfg)
			drained(t, tg.c, "thr.in", len(keys))
			stopBoth(t, a, b)
			ss := spans(t, logPath)
			if len(ss) != len(keys) {
				t.Fatalf("%d handler runs, want %d", len(ss), len(keys))
			}
			starts := make([]int64, len(ss))
			for i, s := range ss {
				starts[i] = s.start
			}
			sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
			// At most 4 starts in any 500ms window (admission happens in Redis a little before
			// the shell notes its start, hence the slack).
			for i := 4; i < len(starts); i++ {
				if gap := time.Duration(starts[i] - starts[i-4]); gap < 450*time.Millisecond {
					t.Fatalf("starts %d and %d only %v apart: more than 4 per 500ms", i-4, i, gap)
				}
			}
			if el := time.Since(begin); el < 1500*time.Millisecond {
				t.Fatalf("16 starts at 4 per 500ms took %v", el)
			}
			assertFlowKeysExpire(t, tg.c, "thr")
		})
	}
}

func TestFlowDedupeAcrossProcesses(t *testing.T) {
	for _, tg := range flowTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "spans.log")
			cfg := writeFile(t, dir, "flow.hcl", flowPipeline(tg, "dd", "dd.in", logPath, "0.05", `  dedupe {
    key    = "headers['k']"
    window = "1h"
  }`))
			// Each id three times, the copies side by side, so both processes read copies of
			// one id at once.
			var keys []string
			for i := range 8 {
				id := "order-" + strconv.Itoa(i)
				keys = append(keys, id, id, id)
			}
			addKeyed(t, tg.c, "dd.in", keys...)
			addrA, addrB := freeAddr(t), freeAddr(t)
			a := start(t, "run", "--consumer", "w1", "--log-level", "debug", "--http-addr", addrA, cfg)
			b := start(t, "run", "--consumer", "w2", "--log-level", "debug", "--http-addr", addrB, cfg)
			drained(t, tg.c, "dd.in", len(keys))
			// flowrun_messages_total counts the copies with outcome duplicate (SPEC §10).
			re := regexp.MustCompile(`flowrun_messages_total\{outcome="duplicate",pipeline="dd"\} (\d+)`)
			eventually(t, 5*time.Second, "16 duplicates counted", func() bool {
				n := 0
				for _, addr := range []string{addrA, addrB} {
					_, body := httpGet("http://" + addr + "/metrics")
					if m := re.FindStringSubmatch(body); m != nil {
						k, _ := strconv.Atoi(m[1])
						n += k
					}
				}
				return n == 16
			})
			stopBoth(t, a, b)
			count := map[string]int{}
			for _, s := range spans(t, logPath) {
				count[s.key]++
			}
			if len(count) != 8 {
				t.Fatalf("handled ids %v, want 8", count)
			}
			for id, n := range count {
				if n != 1 {
					t.Fatalf("%s handled %d times", id, n)
				}
			}
			dups := strings.Count(a.err.String(), `"outcome":"duplicate"`) + strings.Count(b.err.String(), `"outcome":"duplicate"`)
			if dups != 16 {
				t.Fatalf("%d deliveries logged as duplicate, want 16", dups)
			}
			ctx := context.Background()
			v, err := tg.c.Get(ctx, "flowrun:{dd}:d:order-3").Result()
			if err != nil || v != "done" {
				t.Fatalf("dedupe key: %q, %v", v, err)
			}
			if ttl := tg.c.PTTL(ctx, "flowrun:{dd}:d:order-3").Val(); ttl < 59*time.Minute {
				t.Fatalf("dedupe key kept for %v, want the window", ttl)
			}
		})
	}
}

// assertFlowKeysExpire checks that every flow-control key of the pipeline has an expiry.
func assertFlowKeysExpire(t *testing.T, c redis.UniversalClient, pipeline string) {
	t.Helper()
	ctx := context.Background()
	var keys []string
	pattern := "flowrun:{" + pipeline + "}:*"
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			keys = append(keys, n.Keys(ctx, pattern).Val()...)
			return nil
		})
	} else {
		keys = c.Keys(ctx, pattern).Val()
	}
	for _, k := range keys {
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Fatalf("flow-control key %s has no expiry (%v)", k, ttl)
		}
	}
}

// A process killed while it holds a concurrency key blocks that key for at most its lease: the
// other process starts the key's next message once the lease has run out, and the key's state
// expires.
func TestFlowCrashedLeaseExpires(t *testing.T) {
	for _, tg := range flowTargets(t) {
		t.Run(tg.name, func(t *testing.T) { crashWhileHolding(t, tg) })
	}
}

func crashWhileHolding(t *testing.T, tg flowTarget) {
	c := tg.c
	dir := t.TempDir()
	logPath := filepath.Join(dir, "spans.log")
	cfg := writeFile(t, dir, "flow.hcl", flowPipeline(tg, "crash", "crash.in", logPath, "3", `  concurrency_key {
    key   = "headers['k']"
    limit = 1
    lease = "1s"
  }
  dedupe {
    key    = "payload"
    window = "1h"
    lease  = "1s"
  }`))
	ctx := context.Background()
	addKeyed(t, c, "crash.in", "x")
	a := start(t, "run", "--consumer", "w1", cfg)
	eventually(t, 10*time.Second, "w1 holding key x", func() bool {
		return c.ZCard(ctx, "flowrun:{crash}:c:x").Val() == 1
	})
	// Held and renewed past its lease while the handler runs.
	time.Sleep(1500 * time.Millisecond)
	if c.ZCard(ctx, "flowrun:{crash}:c:x").Val() != 1 || c.Get(ctx, "flowrun:{crash}:d:0").Val() == "" {
		t.Fatal("the lease or the dedupe claim was not kept alive while the handler ran")
	}
	a.signal(syscall.SIGKILL)
	a.wait(5 * time.Second)
	killed := time.Now()

	b := start(t, "run", "--consumer", "w2", "--log-level", "debug", cfg)
	addKeyed(t, c, "crash.in", "x")
	eventually(t, 10*time.Second, "w2 starting key x", func() bool {
		for _, s := range spans(t, logPath) {
			if s.pid != "" && s.start > killed.UnixNano() {
				return true
			}
		}
		return false
	})
	if waited := time.Since(killed); waited > 1*time.Second+2*time.Second {
		t.Fatalf("key x stayed blocked %v after the kill; its lease is 1s", waited)
	}
	// The dead process's dedupe claim ran out too: nothing of it is left without expiry.
	eventually(t, 5*time.Second, "the dead claim expired", func() bool {
		v := c.Get(ctx, "flowrun:{crash}:d:0").Val()
		return v == "" || !strings.HasPrefix(v, "run:")
	})
	b.signal(syscall.SIGTERM)
	b.wait(20 * time.Second)
	assertFlowKeysExpire(t, c, "crash")
}

// Claimed entries that wait for their key are kept from looking idle (SPEC §13, §4): with six
// entries of one key and a handler of 400ms, entries wait in a process well past min_idle, yet
// the other process never claims one of them, so none runs twice.
func TestFlowWaitingClaimedEntriesKeptAlive(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	tg := flowTarget{"standalone", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n", "redis://"+srv.Addr+"/0"), c}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "spans.log")
	hcl := flowPipeline(tg, "ka", "ka.in", logPath, "0.4", `  concurrency_key {
    key   = "headers['k']"
    limit = 1
  }`)
	hcl = strings.Replace(hcl, `source "stream" {`, `source "claiming" {
    min_idle = "1s"`, 1)
	hcl = strings.Replace(hcl, "batch  = 2", "batch  = 6", 1)
	cfg := writeFile(t, dir, "flow.hcl", hcl)
	addKeyed(t, c, "ka.in", "x", "x", "x", "x", "x", "x")
	a, b := twoProcesses(t, cfg)
	drained(t, c, "ka.in", 6)
	stopBoth(t, a, b)
	if n := len(spans(t, logPath)); n != 6 {
		t.Fatalf("%d handler runs for 6 entries: a waiting entry was claimed by the other process", n)
	}
}

// File and pipe sources apply the blocks within the process: a pipe of records with repeated
// order ids emits each order once, the copies counted as duplicates, and a throttle spaces the
// starts.
func TestFlowOnAPipe(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pipe.hcl", `pipeline "p" {
  source "pipe" {}
  out_retry    = "again"
  max_attempts = 3
  dedupe {
    key    = "payload.id"
    window = "1h"
  }
  throttle {
    limit  = 3
    period = "300ms"
  }
  rule "ok" {
    emit "record" {
      key     = "done"
      payload = "payload.id"
    }
    outcome = "ack"
  }
}
`)
	var in strings.Builder
	for i := range 9 {
		fmt.Fprintf(&in, `{"key":"in","payload":{"id":%d}}`+"\n", i%3)
	}
	in.WriteString(`{"key":"in","payload":{"other":1}}` + "\n") // no id: the key fails, a retry copy
	begin := time.Now()
	r := flowrun(t, in.String(), "run", "--log-level", "debug", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := []string{`{"key":"again","headers":{"x-retry-count":"1"},"payload":{"other":1}}`,
		`{"key":"done","payload":0}`, `{"key":"done","payload":1}`, `{"key":"done","payload":2}`}
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stdout:\n%s\nwant (in any order):\n%s", r.stdout, strings.Join(want, "\n"))
	}
	if n := strings.Count(r.stderr, `"outcome":"duplicate"`); n != 6 {
		t.Fatalf("%d duplicates logged, want 6:\n%s", n, r.stderr)
	}
	// 10 records, 3 starts per 300ms (duplicates and the failed key take no start): the 3
	// handled start at once; the run is not held back.
	if el := time.Since(begin); el > 5*time.Second {
		t.Fatalf("took %v", el)
	}
}

// Flow control on a file replay: the in-process store decides as Redis does (SPEC §13, within
// the process): one handler per key value at once, at most 2 starts per 300ms, each id handled
// once and its copies acknowledged as duplicates, and the replay ends by itself.
func TestFlowOnAFile(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "spans.log")
	script := fmt.Sprintf(`echo "start $FLOWRUN_HEADER_K $(date +%%s%%N) $PPID" >> %s; sleep 0.05; echo "end $FLOWRUN_HEADER_K $(date +%%s%%N) $PPID" >> %s`, logPath, logPath)
	var in strings.Builder
	for i := range 12 {
		id := i % 8 // ids 0-3 twice
		fmt.Fprintf(&in, `{"key":"in","headers":{"k":"c%d"},"payload":{"id":%d}}`+"\n", id%3, id)
	}
	writeFile(t, dir, "in.jsonl", in.String())
	cfg := writeFile(t, dir, "file.hcl", fmt.Sprintf(`pipeline "f" {
  source "file" {
    path = "in.jsonl"
  }
  concurrency  = 4
  max_attempts = 3
  concurrency_key {
    key   = "headers['k']"
    limit = 1
  }
  throttle {
    limit  = 2
    period = "300ms"
  }
  dedupe {
    key    = "payload.id"
    window = "1h"
  }
  handler "exec" {
    command = ["/bin/sh", "-c", %q]
  }
}
`, script))
	begin := time.Now()
	r := flowrun(t, "", "run", "--log-level", "debug", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, `"outcome":"duplicate"`); n != 4 {
		t.Fatalf("%d duplicates logged, want 4:\n%s", n, r.stderr)
	}
	ss := spans(t, logPath)
	if len(ss) != 8 {
		t.Fatalf("%d handler runs, want 8 (one per id)", len(ss))
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].start < ss[j].start })
	last := map[string]span{}
	for i, s := range ss {
		if p, ok := last[s.key]; ok && s.start < p.end {
			t.Fatalf("key %s: two handlers overlapped: %+v and %+v", s.key, p, s)
		}
		last[s.key] = s
		// At most 2 starts in any 300ms (the shell notes its start a little after admission).
		if i >= 2 {
			if gap := time.Duration(s.start - ss[i-2].start); gap < 270*time.Millisecond {
				t.Fatalf("starts %d and %d only %v apart: more than 2 per 300ms", i-2, i, gap)
			}
		}
	}
	if el := time.Since(begin); el < 900*time.Millisecond {
		t.Fatalf("8 starts at 2 per 300ms took %v", el)
	}
}
