package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
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
