package engine

import (
	"testing"
	"time"
)

// The handoff keeps the channel's guarantees it replaced: decisions in the order put, a put
// past limit waits until the settler takes, and after close the settler gets what is left and
// learns nothing more comes.
func TestHandoffOrderLimitClose(t *testing.T) {
	h := newHandoff(2)
	dec := func(n int) *Decision { return &Decision{Label: Label(n)} }
	h.put(dec(1))
	h.putAll([]Decision{*dec(2)})
	select {
	case <-h.ready:
	default:
		t.Fatal("a put into an empty handoff did not wake the settler")
	}
	third := make(chan struct{})
	go func() { h.put(dec(3)); close(third) }()
	select {
	case <-third:
		t.Fatal("a put past limit did not wait")
	case <-time.After(50 * time.Millisecond): // it waits: nothing to poll for but its absence
	}
	got, closed := h.take(nil)
	if closed || len(got) != 2 || got[0].Label != 1 || got[1].Label != 2 {
		t.Fatalf("take = %v closed %v, want labels 1, 2 and open", got, closed)
	}
	select {
	case <-third:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting put did not go in once the settler took")
	}
	h.close()
	got, closed = h.take(got)
	if !closed || len(got) != 1 || got[0].Label != 3 {
		t.Fatalf("take after close = %v closed %v, want label 3 and closed", got, closed)
	}
	if got, closed = h.take(got); !closed || len(got) != 0 {
		t.Fatalf("an empty closed handoff gave %v closed %v", got, closed)
	}
}
