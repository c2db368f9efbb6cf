package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// SPEC §10 "Faults, bounded" and "Eviction", through the binary against real redis-server
// processes (docs/faults.md): a Redis that refuses writes for lack of memory, a connection that
// stops answering without closing, and the warning an evicting Redis gets at start.

// evictionWarning is the start of the line an evicting Redis gets.
const evictionWarning = "redis maxmemory-policy is "

// countLines counts the lines of logs that contain sub.
func countLines(logs, sub string) int {
	n := 0
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// TestFullRedis: a Redis at maxmemory with noeviction refuses the emits (OOM). Nothing is
// acknowledged without its emit: every entry stays pending while memory is full. The refusals
// are logged once (per command, key and reason per progress interval), not once per message,
// and counted per message in flowrun_settle_failures_total. Once memory is freed, everything
// arrives within SPEC's 10 s.
func TestFullRedis(t *testing.T) {
	t.Parallel()
	const n = 300
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	e := &recEnv{t: t, rdb: srv.Client(t), ctx: context.Background()}
	cfg := writeFile(t, t.TempDir(), "rec.hcl",
		recoveryPipeline(fmt.Sprintf("redis \"main\" {\n  url = %q\n}", srv.URL), "stream"))
	addr := freeAddr(t)
	e.p = start(t, "run", "--http-addr", addr, cfg)
	e.add(false, "warm")
	e.waitHandled(time.Now().Add(20*time.Second), "warm")
	e.settled(false)

	// The entries and the full memory arrive together: flowrun reads them once Redis refuses
	// every write (maxmemory 1 byte, below what Redis already uses).
	payloads := batch("m", n)
	_, err := e.rdb.TxPipelined(e.ctx, func(p redis.Pipeliner) error {
		for _, pl := range payloads {
			p.XAdd(e.ctx, &redis.XAddArgs{Stream: recJobs, Values: []string{"payload", pl}})
		}
		p.ConfigSet(e.ctx, "maxmemory", "1")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	full := time.Now()
	eventually(t, 15*time.Second, "every entry read and pending", func() bool {
		p, err := e.rdb.XPending(e.ctx, recJobs, "rec").Result()
		return err == nil && p.Count == n
	})
	// Memory stays full for a while: nothing may be acknowledged or emitted meanwhile.
	for time.Since(full) < 4*time.Second {
		p, err := e.rdb.XPending(e.ctx, recJobs, "rec").Result()
		if err != nil || p.Count != n {
			t.Fatalf("pending %v (%v) while Redis refuses writes, want %d: something was acknowledged without its emit", p, err, n)
		}
		if l := e.rdb.XLen(e.ctx, recDone).Val(); l != 1 {
			t.Fatalf("XLEN %s = %d while Redis refuses writes, want 1", recDone, l)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, metrics := httpGet("http://" + addr + "/metrics")
	logs := e.p.err.String()

	if err := e.rdb.ConfigSet(e.ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	handled := e.waitHandled(freed.Add(recoveryBound), payloads...)
	e.settled(false)
	t.Logf("full redis: %d entries handled %s after memory was freed; %d duplicates",
		n, handled.Sub(freed).Round(time.Millisecond), e.duplicates())

	refused := countLines(logs, "emit refused")
	warnings := countLines(logs, `"level":"warn"`) + countLines(logs, `"level":"error"`)
	t.Logf("while full: %d log lines about refused emits, %d warn or error lines in all", refused, warnings)
	if refused != 1 {
		t.Errorf("refused emits logged %d times, want once (per command, key and reason per interval):\n%s", refused, grepLines(logs, "refused"))
	}
	if c := countLines(logs, "handler failed"); c != 0 {
		t.Errorf(`%d "handler failed" lines for refused emits, want none`, c)
	}
	if warnings > 10 {
		t.Errorf("%d warn or error lines while Redis was full, want a handful:\n%.3000s", warnings, logs)
	}
	if !strings.Contains(logs, "OOM command not allowed") || !strings.Contains(logs, `"key":"{rec}done"`) {
		t.Errorf("the refusal's line lacks Redis's own text or the key:\n%s", grepLines(logs, "refused"))
	}
	if !strings.Contains(metrics, `flowrun_settle_failures_total{pipeline="rec",reason="oom"}`) {
		t.Errorf("no oom settle failures in /metrics:\n%s", grepLines(metrics, "settle_failures"))
	}
	e.stop()
}

// TestBlackholeRecovery: a proxy between flowrun and Redis stops forwarding without closing
// anything (a partition, a frozen middlebox) for 15 s, then heals. Read timeouts find the dead
// connections and replace them: entries added during the partition are handled within SPEC's
// 10 s of the heal, nothing lost, and so are entries added after it.
func TestBlackholeRecovery(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	e := startRecovery(t, redisconn.Options{URL: srv.URL},
		recoveryPipeline(fmt.Sprintf("redis \"main\" {\n  url = %q\n}", proxy.URL()), "stream"))
	e.add(false, "first")
	e.waitHandled(time.Now().Add(20*time.Second), "first")
	e.settled(false)

	proxy.Blackhole()
	during, after := batch("d", 20), batch("a", 20)
	e.add(false, during...)      // the test's client goes straight to Redis
	time.Sleep(15 * time.Second) // the partition itself, not a wait for a condition
	if seen, _ := e.done(); seen["d0"] > 0 {
		t.Fatal("an entry was handled through the blackhole: the proxy forwarded")
	}
	proxy.Heal()
	healed := time.Now()
	handled := e.waitHandled(healed.Add(recoveryBound), during...)
	e.add(false, after...)
	e.waitHandled(time.Now().Add(recoveryBound), after...)
	e.settled(false)
	t.Logf("blackhole: entries added during a 15 s partition handled %s after the heal; %d duplicates",
		handled.Sub(healed).Round(time.Millisecond), e.duplicates())
	e.stop()
}

// TestEvictionWarning: at start flowrun reads each Redis's maxmemory-policy and warns, once,
// naming it and noeviction, when it evicts (SPEC §10 "Eviction"); noeviction gets no warning. A
// user granted exactly the lines of docs/acl.md is refused INFO and CONFIG: flowrun logs that at
// debug and runs as usual; with the optional +info line it reads the policy and Redis refuses
// nothing.
func TestEvictionWarning(t *testing.T) {
	t.Parallel()
	// run starts flowrun on srv, has it handle one entry, stops it and returns its log.
	run := func(t *testing.T, srv *redistest.Server) string {
		t.Helper()
		cfg := writeFile(t, t.TempDir(), "rec.hcl",
			recoveryPipeline(fmt.Sprintf("redis \"main\" {\n  url = %q\n}", srv.URL), "stream"))
		e := &recEnv{t: t, rdb: srv.Client(t), ctx: context.Background(), p: start(t, "run", cfg)}
		e.add(false, "x")
		e.waitHandled(time.Now().Add(15*time.Second), "x")
		e.stop()
		return e.p.err.String()
	}
	t.Run("allkeys-lru", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
		logs := run(t, srv)
		if c := countLines(logs, evictionWarning); c != 1 {
			t.Fatalf("%d eviction warnings, want one:\n%s", c, logs)
		}
		line := grepLines(logs, evictionWarning)
		for _, want := range []string{`"level":"warn"`, "allkeys-lru", "noeviction", "stream entries", "dead letters"} {
			if !strings.Contains(line, want) {
				t.Errorf("the warning lacks %q:\n%s", want, line)
			}
		}
	})
	t.Run("noeviction", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
		if logs := run(t, srv); strings.Contains(logs, evictionWarning) {
			t.Fatalf("a warning for noeviction:\n%s", grepLines(logs, evictionWarning))
		}
	})
	t.Run("exact ACL", func(t *testing.T) {
		t.Parallel()
		e := newACLEnv(t)
		e.admin.ConfigSet(e.ctx, "maxmemory-policy", "volatile-lru")
		e.grant(aclUser, []string{`source "stream"`, "dead_letter, stream sources", `emit "stream"`})
		source := "  source \"stream\" {\n    stream   = \"jobs\"\n    consumer = \"w1\"\n    block    = \"100ms\"\n  }"
		cfg := e.config("flow", aclUser, source, "", aclRules("stream", "jobs.done"))
		e.xaddAll()
		p := start(t, "run", "--log-level", "debug", cfg)
		eventually(t, aclDeadline, "every message emitted or dead-lettered", func() bool {
			return e.xlen("jobs.done") == aclEmits && e.xlen("jobs.dlq") == aclDead && e.pending() == 0
		})
		aclStop(t, p)
		logs := p.err.String()
		if strings.Contains(logs, evictionWarning) {
			t.Errorf("a warning although the user may read neither INFO nor CONFIG:\n%s", grepLines(logs, evictionWarning))
		}
		if !strings.Contains(logs, "could not read maxmemory-policy") {
			t.Errorf("no debug line saying the check could not read the policy:\n%.3000s", logs)
		}
		if d := e.denials(); len(d) > 0 {
			t.Errorf("Redis refused more than the eviction check:\n  %s", strings.Join(d, "\n  "))
		}
		var asked []string
		for _, x := range e.admin.ACLLog(e.ctx, 100).Val() {
			if evictionCheck(x) {
				asked = append(asked, x.Object)
			}
		}
		if len(asked) != 2 {
			t.Errorf("ACL LOG has the eviction check's refusals %v, want info and config|get once each", asked)
		}

		// With the optional line the check reads INFO memory, and Redis refuses nothing.
		e.admin.ACLLogReset(e.ctx)
		e.grant(aclUser, []string{`source "stream"`, "dead_letter, stream sources", `emit "stream"`, "the eviction warning of run (optional)"})
		p = start(t, "run", cfg)
		eventually(t, aclDeadline, "the eviction warning", func() bool { return strings.Contains(p.err.String(), evictionWarning) })
		aclStop(t, p)
		if !strings.Contains(grepLines(p.err.String(), evictionWarning), "volatile-lru") {
			t.Errorf("the warning does not name volatile-lru:\n%s", grepLines(p.err.String(), evictionWarning))
		}
		entries, err := e.admin.ACLLog(e.ctx, 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range entries {
			t.Errorf("Redis refused %s", aclEntry(x))
		}
	})
}
