package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// notReady is a fakeSource that says whether it is connected, as Redis sources do.
type notReady struct {
	*fakeSource
	ready atomic.Bool
}

func (n *notReady) Ready() bool { return n.ready.Load() }

func TestStatusTotalsStateAndRate(t *testing.T) {
	src := &notReady{fakeSource: &fakeSource{deliveries: deliveries(5), infinite: true}}
	release := make(chan struct{})
	var handled atomic.Int64
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		if handled.Add(1) == 5 {
			<-release // one handler stays in flight
		}
		if d.ID == "1" {
			return Result{Outcome: Drop()}
		}
		return Result{Outcome: Ack()}
	})
	e := New(Options{}, p)
	if got := e.Status(); len(got) != 0 {
		t.Fatalf("before Run: %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	var st PipelineStatus
	deadline := time.Now().Add(5 * time.Second)
	for {
		if s := e.Status(); len(s) == 1 {
			st = s[0]
			if st.Totals["ack"]+st.Totals["drop"] == 4 && st.Inflight == 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed 4 settled and 1 in flight: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st.Name != "p" || st.State != StateWaiting || st.Totals["drop"] != 1 || st.Totals["ack"] != 3 || st.Held != 0 {
		t.Errorf("status = %+v, want p waiting for Redis, 3 ack, 1 drop", st)
	}
	if st.Rate <= 0 || st.Rates["ack"] <= 0 || st.Rates["retry"] != 0 {
		t.Errorf("rates = %v (%v), want a positive ack rate", st.Rates, st.Rate)
	}
	src.ready.Store(true)
	if s := e.Status(); s[0].State != StateRunning {
		t.Errorf("ready source: state %q, want running", s[0].State)
	}
	close(release)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := e.Status()
	if s[0].State != StateStopped || s[0].Totals["ack"] != 4 || s[0].Inflight != 0 || s[0].Rate != 0 {
		t.Errorf("after stop: %+v", s[0])
	}
}
