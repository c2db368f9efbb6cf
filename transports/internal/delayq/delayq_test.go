package delayq

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestLower(t *testing.T) {
	var next atomic.Int64
	for _, tt := range []struct{ ms, want int64 }{{500, 500}, {700, 500}, {300, 300}, {300, 300}} {
		if Lower(&next, tt.ms); next.Load() != tt.want {
			t.Fatalf("after %d: %d, want %d", tt.ms, next.Load(), tt.want)
		}
	}
}

func TestBlockFor(t *testing.T) {
	now := time.Now()
	if b := BlockFor(time.Second, 0); b != time.Second {
		t.Fatalf("none due: %v", b)
	}
	if b := BlockFor(time.Second, now.Add(time.Hour).UnixMilli()); b != time.Second {
		t.Fatalf("due after the block: %v", b)
	}
	if b := BlockFor(time.Second, now.Add(200*time.Millisecond).UnixMilli()); b <= 0 || b > 200*time.Millisecond {
		t.Fatalf("due within the block: %v", b)
	}
	if b := BlockFor(time.Second, now.Add(-time.Minute).UnixMilli()); b != time.Millisecond {
		t.Fatalf("overdue: %v, want 1ms", b)
	}
}

func TestParseScore(t *testing.T) {
	for s, want := range map[string]int64{"": 0, "1700000000123": 1700000000123, "1.7e12": 1700000000000, "x": 0} {
		if got := ParseScore(s); got != want {
			t.Errorf("%q: %d, want %d", s, got, want)
		}
	}
}
