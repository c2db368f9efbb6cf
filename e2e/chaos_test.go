package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Faults and stops through the built binary: how fast an idle pipeline stops, and a bounded
// chaos soak (kill -9 of workers, of Redis with AOF, SIGSTOP) whose end state must show nothing
// lost, nothing pending and every cap honoured.

// TestStopPromptWhileIdle: SIGTERM on an idle pipeline whose read blocks for 5 s exits at once:
// the blocked XREADGROUP is cut short instead of waited out.
func TestStopPromptWhileIdle(t *testing.T) {
	for _, kind := range []string{"stream", "claiming", "reclaim"} {
		t.Run(kind, func(t *testing.T) {
			e := newStreamEnv(t)
			rules := "  rule \"all\" {\n" + streamSeenEmit + "    outcome = \"ack\"\n  }\n"
			cfg := e.streamConfig(streamPipeline(kind, "    block    = \"5s\"\n", "", rules))
			p := start(t, "run", "--consumer", "w1", cfg)
			e.streamXAdd("jobs", "payload", "p")
			e.streamWaitSeen(1)
			e.streamSettled(streamDeadline)
			eventually(t, streamDeadline, "the read blocked in XREADGROUP", func() bool {
				return chaosBlockedReads(e) > 0
			})
			began := time.Now()
			p.signal(syscall.SIGTERM)
			code := p.wait(10 * time.Second)
			took := time.Since(began)
			t.Logf("%s: exit %d %v after SIGTERM (block 5s)", kind, code, took)
			if code != 0 {
				t.Fatalf("exit %d after SIGTERM, want 0; stderr:\n%s", code, p.err.String())
			}
			if took > 2*time.Second {
				t.Fatalf("exit took %v after SIGTERM on an idle pipeline; want well under 1s", took)
			}
		})
	}
}

// chaosBlockedReads counts the clients blocked in XREADGROUP.
func chaosBlockedReads(e *streamEnv) int {
	list, err := e.rdb.ClientList(e.ctx).Result()
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, "cmd=xreadgroup") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(v, "b") {
				n++
			}
		}
	}
	return n
}

const (
	chaosEntries     = 6000
	chaosWorkers     = 3
	chaosMaxAttempts = 3
	chaosMinIdle     = 500 * time.Millisecond
)

// chaosPipeline is a claiming pipeline where every 20th entry always fails (its third failure is
// dead-lettered), every 20th+1 fails once, and every other is emitted to "out" with its id and
// attempt, then acknowledged.
var chaosPipeline = fmt.Sprintf(`pipeline "jobs" {
  source "claiming" {
    stream   = "jobs"
    group    = "jobs"
    min_idle = %q
    batch    = 50
    block    = "200ms"
  }
  concurrency  = 8
  max_attempts = %d
  dead_letter  = "jobs.dlq"

  rule "poison" {
    when    = "headers['kind'] == 'poison'"
    outcome = "retry"
  }
  rule "flaky" {
    when    = "headers['kind'] == 'flaky' && attempt < 2"
    outcome = "retry"
  }
  rule "ok" {
    emit "stream" {
      key     = "out"
      payload = "id"
      headers = { attempt = "attempt", kind = "headers['kind']" }
    }
    outcome = "ack"
  }
}
`, chaosMinIdle, chaosMaxAttempts)

func chaosKind(i int) string {
	switch i % 20 {
	case 0:
		return "poison"
	case 1:
		return "flaky"
	}
	return "ok"
}

// TestChaosSoak: a backlog fed while workers are killed with SIGKILL and restarted, Redis (AOF,
// fsync always) is killed and restarted on its port and data, and a worker is frozen with
// SIGSTOP past min_idle. At the end every entry is accounted for exactly through handling (in
// "out", emitted by a rule, or in the dead letter), nothing is pending, and no handler ran past
// max_attempts. Duplicates (at-least-once) are allowed, counted and logged.
func TestChaosSoak(t *testing.T) {
	began := time.Now()
	e := newStreamEnv(t, "--appendonly", "yes", "--appendfsync", "always")
	cfg := e.streamConfig(chaosPipeline)
	ctx := context.Background()

	workers := make([]*proc, chaosWorkers)
	run := func(i int) { workers[i] = start(t, "run", "--consumer", fmt.Sprintf("w%d", i+1), cfg) }
	for i := range workers {
		run(i)
	}
	kills := 0
	kill := func(i int) {
		t.Helper()
		if err := workers[i].cmd.Process.Kill(); err != nil {
			t.Fatalf("kill w%d: %v", i+1, err)
		}
		if code := workers[i].wait(5 * time.Second); code != -int(syscall.SIGKILL) {
			t.Fatalf("w%d exit %d, want killed by SIGKILL", i+1, code)
		}
		kills++
		run(i)
	}

	// The producer feeds the backlog over ~10 s, through the Redis restart: a chunk that fails
	// is sent again (MULTI/EXEC, so it is all or nothing; a reply lost after EXEC leaves a
	// duplicate chunk, which only adds entries to account for).
	prod := redis.NewClient(&redis.Options{Addr: e.srv.Addr})
	defer prod.Close()
	produced := make(chan error, 1)
	go func() {
		const chunk = 60
		for next := 0; next < chaosEntries; {
			_, err := prod.TxPipelined(ctx, func(p redis.Pipeliner) error {
				for i := next; i < min(next+chunk, chaosEntries); i++ {
					p.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"payload", strconv.Itoa(i), "kind", chaosKind(i)}})
				}
				return nil
			})
			if err == nil {
				next += chunk
			}
			if time.Since(began) > 40*time.Second {
				produced <- fmt.Errorf("producer gave up at %d of %d: %v", next, chaosEntries, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		produced <- nil
	}()

	// The chaos, on a fixed schedule (seconds after the start).
	at := func(sec float64) {
		if d := time.Until(began.Add(time.Duration(sec * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
	}
	at(1.5)
	kill(0)
	at(3)
	kill(1)
	at(4.5)
	workers[2].signal(syscall.SIGSTOP)
	at(5.5)
	kill(0) // while w3 is frozen
	at(6.5) // frozen for 4 min_idle: the others claim what it held
	workers[2].signal(syscall.SIGCONT)
	at(7.5)
	e.srv.Kill()
	at(8.5)
	if err := e.srv.RestartErr(); err != nil {
		t.Fatalf("restart redis on its AOF: %v", err)
	}
	at(10)
	kill(0)
	at(11.5)
	kill(2)
	at(13)
	kill(1)
	if err := <-produced; err != nil {
		t.Fatal(err)
	}

	// Drained: every entry emitted or dead-lettered and nothing pending, and still so after
	// a few min_idle (a late claim would show).
	drained := func() bool {
		gs, err := e.rdb.XInfoGroups(ctx, "jobs").Result()
		if err != nil || len(gs) != 1 || gs[0].Pending != 0 {
			return false
		}
		kindOf, out, dead := chaosAccount(e)
		for id := range kindOf {
			if out[id] == 0 && dead[id] == 0 {
				return false
			}
		}
		return true
	}
	deadline := began.Add(45 * time.Second)
	for !drained() || !func() bool { time.Sleep(3 * chaosMinIdle); return drained() }() {
		if time.Now().After(deadline) {
			t.Errorf("not drained 45 s after the start; the checks below say what is missing")
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	for i, w := range workers {
		w.signal(syscall.SIGTERM)
		if code := w.wait(10 * time.Second); code != 0 {
			t.Errorf("w%d exit %d after SIGTERM, want 0; stderr:\n%s", i+1, code, w.err.String())
		}
	}
	took := time.Since(began)

	// Account for every entry: first that the stream holds all of them (AOF kept what was
	// acknowledged before the kill), then that each was handled.
	payloads := map[string]bool{}
	for _, x := range e.streamXRange("jobs") {
		payloads[streamField(x, "payload")] = true
	}
	for i := range chaosEntries {
		if !payloads[strconv.Itoa(i)] {
			t.Errorf("entry %d is not in the stream jobs (lost with the Redis kill?)", i)
		}
	}
	kindOf, out, dead := chaosAccount(e)
	overCap := 0
	for _, x := range e.streamXRange("out") {
		id := streamField(x, "payload")
		n, err := strconv.Atoi(streamField(x, "attempt"))
		switch k := kindOf[id]; {
		case k == "":
			t.Errorf("out entry %s names %q, not an entry of jobs", x.ID, id)
		case err != nil || n < 1 || n > chaosMaxAttempts:
			overCap++
			t.Errorf("%s (%s) handled at attempt %q, want 1..%d", id, k, streamField(x, "attempt"), chaosMaxAttempts)
		case k == "poison":
			t.Errorf("%s is poison yet was emitted (attempt %d)", id, n)
		case k == "flaky" && n < 2:
			t.Errorf("%s is flaky yet was emitted at attempt %d", id, n)
		}
	}
	skipped := 0
	for _, x := range e.streamXRange("jobs.dlq") {
		f := streamFields(x)
		id, reason := f["x-original-id"], f["x-dead-letter-reason"]
		n, err := strconv.Atoi(f["x-attempts"])
		switch {
		case kindOf[id] == "":
			t.Errorf("dead letter %s names %q, not an entry of jobs", x.ID, id)
		case err != nil:
			t.Errorf("dead letter of %s: x-attempts %q", id, f["x-attempts"])
		case strings.Contains(reason, "reached"):
			// The handler ran on the last attempt and asked to retry.
			if n != chaosMaxAttempts || kindOf[id] != "poison" {
				t.Errorf("dead letter of %s (%s): x-attempts %d, reason %q", id, kindOf[id], n, reason)
			}
		case strings.Contains(reason, "exceeds"):
			// Claimed once too often by workers that died holding it: the handler was skipped.
			skipped++
			if n <= chaosMaxAttempts {
				t.Errorf("dead letter of %s: x-attempts %d with reason %q", id, n, reason)
			}
		default:
			t.Errorf("dead letter of %s: reason %q", id, reason)
		}
	}
	var lost []string
	dupOut, dupDead, both := 0, 0, 0
	for id, k := range kindOf {
		switch {
		case out[id] == 0 && dead[id] == 0:
			lost = append(lost, id+" ("+k+")")
		case out[id] > 0 && dead[id] > 0:
			both++
		}
		if out[id] > 1 {
			dupOut += out[id] - 1
		}
		if dead[id] > 1 {
			dupDead += dead[id] - 1
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d entries never handled, e.g. %v", len(lost), len(kindOf), lost[:min(10, len(lost))])
	}
	if n := e.streamPendingCount(); n != 0 {
		t.Errorf("XPENDING count %d at the end, want 0", n)
	}
	t.Logf("chaos soak: %d entries, %d emitted (%d duplicates), %d dead letters (%d duplicates, %d with the handler skipped), "+
		"%d in both, %d over the cap; %d worker kills, 1 Redis kill -9 (AOF), 1 SIGSTOP; %v",
		len(kindOf), e.streamXLen("out"), dupOut, e.streamXLen("jobs.dlq"), dupDead, skipped, both, overCap, kills, took.Round(time.Millisecond))
	if took > 60*time.Second {
		t.Errorf("the soak took %v, over its 60 s budget", took)
	}
}

// chaosAccount reads the entries of "jobs" (id -> kind) and how often each was emitted to "out"
// and dead-lettered to "jobs.dlq".
func chaosAccount(e *streamEnv) (kindOf map[string]string, out, dead map[string]int) {
	kindOf, out, dead = map[string]string{}, map[string]int{}, map[string]int{}
	for _, x := range e.streamXRange("jobs") {
		kindOf[x.ID] = streamField(x, "kind")
	}
	for _, x := range e.streamXRange("out") {
		out[streamField(x, "payload")]++
	}
	for _, x := range e.streamXRange("jobs.dlq") {
		dead[streamField(x, "x-original-id")]++
	}
	return kindOf, out, dead
}
