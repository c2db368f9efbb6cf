package e2e

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"
)

// TestListDurableDelaySurvivesKill9: a reliable list with delayed_retry = "durable_zset". A rule
// answers retry_after('3s'); flowrun is killed with kill -9 during the delay; at that moment the
// copy is in the delay queue, the list and the processing list are empty. A restart delivers the
// copy once the delay is up (not before), as attempt 2, and leaves the list, the processing list
// and the delay queue empty.
func TestListDurableDelaySurvivesKill9(t *testing.T) {
	t.Parallel()
	e := newRedisEnv(t)
	ctx := context.Background()
	const delayKey = "jobs:delayed"
	cfg := e.config(`pipeline "jobs" {
  source "list" {
    key      = "jobs"
    consumer = "w1"
    block    = "100ms"
  }
  delayed_retry = "durable_zset"
  rule "later" {
    when    = "attempt < 2"
    outcome = "retry_after('3s')"
  }
  rule "done" {
    emit "record" {
      key     = "seen"
      path    = "seen.jsonl"
      headers = { attempt = "string(attempt)" }
    }
    outcome = "ack"
  }
}
`)
	e.lpush("jobs", `{"n":1}`)
	p := start(t, "run", cfg)
	eventually(t, 10*time.Second, "the copy in the delay queue", func() bool {
		return e.rdb.ZCard(ctx, delayKey).Val() == 1
	})
	zs, err := e.rdb.ZRangeWithScores(ctx, delayKey, 0, -1).Result()
	if err != nil || len(zs) != 1 {
		t.Fatalf("ZRANGE %s = %v, %v; want one copy", delayKey, zs, err)
	}
	due := time.UnixMilli(int64(zs[0].Score))
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(5 * time.Second); code != -int(syscall.SIGKILL) {
		t.Fatalf("exit %d, want killed", code)
	}
	if left := time.Until(due); left < time.Second {
		t.Fatalf("killed only %s before the copy was due; the kill must land during the delay", left)
	}
	if l, pr := e.lrange("jobs"), e.lrange(processing); len(l) != 0 || len(pr) != 0 {
		t.Fatalf("after the kill: list %q, processing list %q; want both empty (the copy is in %s)", l, pr, delayKey)
	}
	if n := e.rdb.ZCard(ctx, delayKey).Val(); n != 1 {
		t.Fatalf("ZCARD %s = %d after the kill, want 1", delayKey, n)
	}
	// flowrun inspect shows the queue: its key, one copy, and when it is due.
	r := flowrun(t, "", "inspect", "--json", cfg)
	var rows []struct {
		DelayKey string  `json:"delay_key"`
		Delayed  *int64  `json:"delayed"`
		NextDue  *string `json:"next_due"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); r.code != 0 || err != nil || len(rows) != 1 {
		t.Fatalf("inspect --json exited %d (%v):\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if row := rows[0]; row.DelayKey != delayKey || row.Delayed == nil || *row.Delayed != 1 || row.NextDue == nil {
		t.Errorf("inspect shows delay_key %q, delayed %v, next_due %v; want %q, 1 and a time:\n%s", row.DelayKey, row.Delayed, row.NextDue, delayKey, r.stdout)
	}

	p = start(t, "run", cfg)
	deadline := time.Now().Add(15 * time.Second)
	for len(e.lines("seen.jsonl")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the delayed copy was not delivered after the restart; stderr:\n%s", p.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if early := time.Until(due); early > 20*time.Millisecond {
		t.Fatalf("the copy was delivered %s before it was due", early)
	}
	eventually(t, 5*time.Second, "the list and the processing list empty", func() bool {
		return e.llen("jobs") == 0 && e.llen(processing) == 0
	})
	stop(t, p)

	seen := e.lines("seen.jsonl")
	if len(seen) != 1 {
		t.Fatalf("seen.jsonl has %d records, want 1: %q", len(seen), seen)
	}
	var rec struct {
		Headers map[string]string `json:"headers"`
		Payload json.RawMessage   `json:"payload"`
	}
	if err := json.Unmarshal([]byte(seen[0]), &rec); err != nil || rec.Headers["attempt"] != "2" || string(rec.Payload) != `{"n":1}` {
		t.Fatalf("record %q (%v), want payload {\"n\":1} at attempt 2", seen[0], err)
	}
	if l, pr := e.lrange("jobs"), e.lrange(processing); len(l) != 0 || len(pr) != 0 {
		t.Errorf("at the end: list %q, processing list %q; want both empty", l, pr)
	}
	if zs, err := e.rdb.ZRange(ctx, delayKey, 0, -1).Result(); err != nil || len(zs) != 0 {
		t.Errorf("at the end: ZRANGE %s = %q, %v; want empty", delayKey, zs, err)
	}
}
