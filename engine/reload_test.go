package engine

import (
	"context"
	"testing"
	"time"
)

// TestStartStopWhileRunning is a reload (SPEC §10) at the engine: Stop drains one pipeline
// (its in-flight handler finishes and is settled) while the others run on, Start adds one,
// and a set emptied by Stop keeps Run waiting for a Start or a stop signal.
func TestStartStopWhileRunning(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	keep := &fakeSource{caps: Capabilities{Ack: true}, infinite: true}
	keepP := pipeline(keep, func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} })
	keepP.Name = "keep"

	started, release := make(chan struct{}), make(chan struct{})
	gone := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(1), infinite: true}
	goneP := pipeline(gone, func(context.Context, *Delivery) Result {
		close(started)
		<-release
		return Result{Outcome: Ack()}
	})
	goneP.Name = "gone"

	e := New(Options{}, keepP, goneP)
	if err := e.Start(keepP); err == nil {
		t.Fatal("Start before Run succeeded")
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	<-e.Started()
	<-started
	if got := names(e.Pipelines()); got != "keep gone" {
		t.Fatalf("running %q", got)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- e.Stop("gone") }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a handler was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if settled, _, _ := gone.snapshot(); len(settled) != 1 || settled[0].Action != ActAck {
		t.Fatalf("in-flight delivery of the stopped pipeline: %v, want acked", settled)
	}
	if !gone.closed {
		t.Fatal("stopped pipeline's source not closed")
	}
	if keep.closed {
		t.Fatal("the other pipeline was stopped too")
	}

	added := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(3), infinite: true}
	addedP := pipeline(added, func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} })
	addedP.Name = "added"
	if err := e.Start(addedP); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(addedP); err == nil {
		t.Fatal("a second Start of a running name succeeded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for settled, _, _ := added.snapshot(); len(settled) < 3; settled, _, _ = added.snapshot() {
		if time.Now().After(deadline) {
			t.Fatalf("added pipeline settled %d of 3", len(settled))
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Emptied by Stop: Run waits.
	for _, n := range []string{"keep", "added"} {
		if err := e.Stop(n); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) when Stop emptied the set", err)
	case <-time.After(50 * time.Millisecond):
	}
	if e.Stop("nothing") != nil {
		t.Fatal("Stop of an unknown name failed")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the stop signal")
	}
	if err := e.Start(addedP); err == nil {
		t.Fatal("Start after Run returned succeeded")
	}
}

// TestRunEndsWhenFiniteSourcesEnd keeps the old contract: a set whose pipelines all end on
// their own ends Run, even when some ended before the others.
func TestRunEndsWhenFiniteSourcesEnd(t *testing.T) {
	a := pipeline(&fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(2)}, func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} })
	b := pipeline(&fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(50)}, func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} })
	a.Name, b.Name = "a", "b"
	if err := run(t, context.Background(), Options{}, a, b); err != nil {
		t.Fatal(err)
	}
	if err := run(t, context.Background(), Options{}); err != nil {
		t.Fatal(err)
	}
}

func names(ps []*Pipeline) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += " "
		}
		s += p.Name
	}
	return s
}
