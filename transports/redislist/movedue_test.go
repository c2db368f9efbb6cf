package redislist

import (
	"testing"
	"time"
)

// TestMoveDueNow: a read runs the move-back script when a known copy is due or a second has
// passed since the last run, and not otherwise (it would be a round trip per read for nothing).
func TestMoveDueNow(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	var s Source
	if !s.moveDueNow(now) {
		t.Error("never run: want a run")
	}
	s.movedAt.Store(now.UnixMilli())
	if s.moveDueNow(now.Add(10 * time.Millisecond)) {
		t.Error("run 10ms ago, nothing known due: want none")
	}
	s.nextDue.Store(now.Add(5 * time.Millisecond).UnixMilli())
	if !s.moveDueNow(now.Add(10 * time.Millisecond)) {
		t.Error("a known copy due 5ms ago: want a run")
	}
	s.nextDue.Store(now.Add(time.Hour).UnixMilli())
	if s.moveDueNow(now.Add(500 * time.Millisecond)) {
		t.Error("next due in an hour, run 500ms ago: want none")
	}
	if !s.moveDueNow(now.Add(moveDueEvery)) {
		t.Error("a second since the last run: want a run (copies other processes delayed)")
	}
}
