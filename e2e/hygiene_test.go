package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// consumer_ttl through the binary (SPEC §11): a consumer of the group idle longer than the ttl
// that owns nothing is deleted; one that owns pending entries is kept however idle, and so is
// the source's own consumer. The pass runs every 10 s (HygieneEvery, not tunable), so the test
// waits for one pass: about 10 s.
func TestConsumerTTLThroughTheBinary(t *testing.T) {
	e := newStreamEnv(t)
	e.streamGroup()
	e.streamXAdd("jobs", "payload", "owned")
	// "a-owns-pending" is listed before "b-idle-empty" (XINFO CONSUMERS is in name order): once
	// the pass deleted b, it has looked at a.
	owned := e.streamReadAs("a-owns-pending", 1)
	if len(owned) != 1 {
		t.Fatalf("read %d entries as a-owns-pending", len(owned))
	}
	if err := e.rdb.XGroupCreateConsumer(e.ctx, "jobs", "jobs", "b-idle-empty").Err(); err != nil {
		t.Fatal(err)
	}
	// ttl 1s: both are idle past it by the first pass, 10 s after the source starts.
	cfg := e.streamConfig(streamPipeline("stream", "    consumer_ttl = \"1s\"\n", "", `
  rule "ok" {
    outcome = "ack"
  }
`))
	p := start(t, "run", cfg)
	consumers := func() map[string]redis.XInfoConsumer {
		cs, err := e.rdb.XInfoConsumers(e.ctx, "jobs", "jobs").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]redis.XInfoConsumer{}
		for _, c := range cs {
			m[c.Name] = c
		}
		return m
	}
	eventually(t, 10*time.Second, "the source's consumer", func() bool { _, ok := consumers()["w1"]; return ok })
	e.streamXAdd("jobs", "payload", "new")
	eventually(t, 25*time.Second, "b-idle-empty deleted by consumer_ttl", func() bool {
		_, ok := consumers()["b-idle-empty"]
		return !ok
	})
	cs := consumers()
	if c, ok := cs["a-owns-pending"]; !ok || c.Pending != 1 {
		t.Errorf("the idle consumer that owns a pending entry: %+v (present %v), want kept with 1 pending", c, ok)
	}
	if _, ok := cs["w1"]; !ok {
		t.Errorf("the source's own consumer was deleted: %v", cs)
	}
	// The log line comes through a pipe after the deletion: wait for it, not just look.
	eventually(t, 5*time.Second, "the deletion logged", func() bool {
		return strings.Contains(p.err.String(), `"consumer":"b-idle-empty"`) && strings.Contains(p.err.String(), "consumer_ttl")
	})
	if strings.Contains(p.err.String(), `"consumer":"a-owns-pending"`) {
		t.Errorf("a-owns-pending is logged as deleted:\n%s", p.err.String())
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// The owned entry is still pending to its owner: nothing was taken from it.
	if pend := e.streamPending(); len(pend) != 1 || pend[0].Consumer != "a-owns-pending" || pend[0].ID != owned[0].ID {
		t.Errorf("pending after the run: %+v, want only %s with a-owns-pending", pend, owned[0].ID)
	}
}
