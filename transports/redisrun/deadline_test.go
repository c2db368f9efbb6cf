package redisrun

import (
	"encoding/json"
	"testing"
	"time"
)

// Deadline reads the timeout of the run's current visit, only while it is registered.
func TestDeadline(t *testing.T) {
	e := newEnv(t)
	now := time.Now().Truncate(time.Millisecond)
	st, tr := e.s.g.Start("r1", json.RawMessage(`{}`), now)
	if ok, err := e.s.Create(e.ctx, st, tr); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, ok, err := e.s.Deadline(e.ctx, "r1", 1); ok || err != nil {
		t.Errorf("reserve has no timeout: %v %v", ok, err)
	}
	got, err := e.s.Get(e.ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := e.s.Apply(e.ctx, e.s.g.Finish(got, nil, 1, "ack", now)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	at, ok, err := e.s.Deadline(e.ctx, "r1", 2)
	if err != nil || !ok || !at.Equal(now.Add(time.Minute)) {
		t.Errorf("charge's deadline: %v %v %v, want %v", at, ok, err, now.Add(time.Minute))
	}
	if err := e.s.Cancel(e.ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.s.Deadline(e.ctx, "r1", 2); ok || err != nil {
		t.Errorf("a cancelled run's deadline: %v %v", ok, err)
	}
}
