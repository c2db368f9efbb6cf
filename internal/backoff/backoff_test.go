package backoff

import (
	"math"
	"testing"
	"time"
)

func TestCap(t *testing.T) {
	tests := []struct {
		base, max time.Duration
		attempt   int
		cap       time.Duration
	}{
		{time.Second, time.Minute, 0, time.Second}, // below 1 counts as 1
		{time.Second, time.Minute, 1, time.Second},
		{time.Second, time.Minute, 2, 2 * time.Second},
		{time.Second, time.Minute, 4, 8 * time.Second},
		{time.Second, time.Minute, 7, time.Minute},
		{time.Second, 5 * time.Minute, 3, 4 * time.Second},
		{time.Second, 5 * time.Minute, 1000, 5 * time.Minute},
		{100 * time.Millisecond, time.Second, 20, time.Second},
		{time.Minute, time.Second, 3, time.Second}, // base above max: max
		{0, time.Second, 3, 0},
		{time.Second, 0, 3, 0},
		{time.Second, time.Duration(math.MaxInt64), 80, time.Duration(math.MaxInt64)}, // no overflow
		{time.Nanosecond, time.Duration(math.MaxInt64), 64, time.Duration(math.MaxInt64)},
	}
	for _, tt := range tests {
		if got := Cap(tt.base, tt.max, tt.attempt); got != tt.cap {
			t.Errorf("Cap(%s, %s, %d) = %s, want %s", tt.base, tt.max, tt.attempt, got, tt.cap)
		}
	}
}

// Full draws uniformly from [0, cap]: every draw in range, the mean near cap/2, the draws
// spanning the whole range.
func TestFullDistribution(t *testing.T) {
	tests := []struct {
		base, max time.Duration
		attempt   int
	}{
		{time.Second, 5 * time.Minute, 1},
		{time.Second, 5 * time.Minute, 3},
		{100 * time.Millisecond, time.Second, 20},
		{time.Second, time.Duration(math.MaxInt64), 80},
		{0, time.Second, 3},
	}
	for _, tt := range tests {
		c := Cap(tt.base, tt.max, tt.attempt)
		t.Run(c.String(), func(t *testing.T) {
			const n = 20000
			var sum float64
			lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
			for range n {
				d := Full(tt.base, tt.max, tt.attempt)
				if d < 0 || d > c {
					t.Fatalf("draw %v outside [0, %v]", d, c)
				}
				sum += float64(d)
				lo, hi = min(lo, d), max(hi, d)
			}
			if c == 0 {
				if hi != 0 {
					t.Fatalf("got %v, want 0", hi)
				}
				return
			}
			// Uniform on [0, cap]: mean cap/2, standard error cap/sqrt(12n) ≈ 0.002 cap.
			if mean := sum / n / float64(c); math.Abs(mean-0.5) > 0.02 {
				t.Errorf("mean %.3f of cap, want 0.5", mean)
			}
			if float64(lo) > 0.01*float64(c) || float64(hi) < 0.99*float64(c) {
				t.Errorf("range [%v, %v] does not span [0, %v]", lo, hi, c)
			}
		})
	}
}

// Doubling waits Base after the first failure, doubles to Max, and starts again after Reset.
func TestDoubling(t *testing.T) {
	b := Doubling{Base: 50 * time.Millisecond, Max: 300 * time.Millisecond}
	if w := b.Wait(); w != 50*time.Millisecond {
		t.Fatalf("Wait before any failure = %s, want Base", w)
	}
	want := []time.Duration{50, 100, 200, 300, 300}
	for i, w := range want {
		if got := b.Fail(); got != w*time.Millisecond {
			t.Fatalf("failure %d: %s, want %s", i+1, got, w*time.Millisecond)
		}
	}
	if b.Wait() != 300*time.Millisecond {
		t.Fatalf("Wait after failures = %s, want Max", b.Wait())
	}
	b.Reset()
	if got := b.Fail(); got != 50*time.Millisecond {
		t.Fatalf("after Reset: %s, want Base", got)
	}
}
