package faultlog

import (
	"sync"
	"testing"
	"time"
)

func TestOnePerIntervalWithCount(t *testing.T) {
	l := New[string](time.Second)
	t0 := time.Unix(1000, 0)
	if ok, n := l.Note("oom", t0); !ok || n != 0 {
		t.Fatalf("first: %v %d, want logged with 0 held back", ok, n)
	}
	for i := 1; i <= 5; i++ {
		if ok, _ := l.Note("oom", t0.Add(time.Duration(i)*100*time.Millisecond)); ok {
			t.Fatalf("occurrence %d within the interval was let through", i)
		}
	}
	if got := l.Suppressed("oom"); got != 5 {
		t.Fatalf("Suppressed = %d, want 5", got)
	}
	if ok, n := l.Note("oom", t0.Add(time.Second)); !ok || n != 5 {
		t.Fatalf("after the interval: %v %d, want logged with 5 held back", ok, n)
	}
	if ok, _ := l.Note("noperm", t0.Add(time.Second)); !ok {
		t.Fatal("another key was held back")
	}
}

func TestZeroIntervalLogsOnce(t *testing.T) {
	l := New[string](0)
	t0 := time.Unix(1000, 0)
	if ok, _ := l.Note("k", t0); !ok {
		t.Fatal("first occurrence held back")
	}
	if ok, _ := l.Note("k", t0.Add(time.Hour)); ok {
		t.Fatal("interval 0 let a second line through")
	}
	l.Forget("k")
	if ok, _ := l.Note("k", t0.Add(time.Hour)); !ok {
		t.Fatal("a forgotten key was held back")
	}
}

func TestBoundedKeys(t *testing.T) {
	l := New[int](time.Minute)
	l.max = 3
	t0 := time.Unix(1000, 0)
	for k := range 3 {
		l.Note(k, t0)
	}
	// Full, nothing expired: a new key is logged every time but not remembered.
	for range 2 {
		if ok, _ := l.Note(99, t0); !ok {
			t.Fatal("a key beyond the bound was held back")
		}
	}
	if len(l.seen) != 3 {
		t.Fatalf("remembered %d keys, want the bound 3", len(l.seen))
	}
	// Once the others' interval has passed, the new key takes a freed place.
	l.Note(99, t0.Add(time.Minute))
	if _, ok := l.seen[99]; !ok {
		t.Fatal("the new key was not remembered after room was made")
	}
}

func TestConcurrentNotes(t *testing.T) {
	l := New[string](time.Hour)
	now := time.Unix(1000, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	logged := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := l.Note("k", now); ok {
					mu.Lock()
					logged++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if logged != 1 || l.Suppressed("k") != 799 {
		t.Fatalf("logged %d, held back %d; want 1 and 799", logged, l.Suppressed("k"))
	}
}
