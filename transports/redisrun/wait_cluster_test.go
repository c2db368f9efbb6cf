package redisrun

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/transports/transporttest"
	"github.com/flowrun/flowrun/workflow"
)

// On a Redis Cluster the wait scripts' keys share the workflow's slot: an event kept before its
// run, the park that hands it on, one that parks, the event that finishes it, and the expiry.
func TestWaitOnCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	ctx := context.Background()
	c, err := redisconn.New(redisconn.Options{Cluster: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := workflow.NewGraph("order", "stop", time.Hour, []workflow.StepDef{
		{Name: "pay", Next: "ship", Timeout: time.Minute, Wait: true, KeepFor: time.Minute},
		{Name: "ship"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(c, g)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	event := func(payload string, keep time.Duration) engine.Result {
		d := &engine.Delivery{Message: engine.Message{Payload: []byte(payload), Headers: map[string]string{}}, Attempt: 1}
		return s.EventHandler("pay", keep, correlateID).Handle(ctx, d)
	}
	if res := event(`{"id":"early"}`, time.Minute); res.Outcome.Kind != engine.KindAck {
		t.Fatalf("early event: %+v", res)
	}
	for _, id := range []string{"early", "late"} {
		st, tr := g.Start(id, []byte(`{}`), time.Now())
		if ok, err := s.Create(ctx, st, tr); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	src := s.StepSource("pay", StepOptions{Consumer: "w", Block: 50 * time.Millisecond}, log)
	r := transporttest.Receive(t, src, 10)
	p := engine.Policy{DeadLetter: s.DeadLetterKey(), Caps: src.Capabilities()}
	visit := func() {
		t.Helper()
		d := r.Next(t)
		res := s.WaitHandler().Handle(ctx, d)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		if err := src.Settle(ctx, []engine.Settlement{p.Decide(d, res.Outcome, nil, time.Now()).Settlement}); err != nil {
			t.Fatal(err)
		}
	}
	visit() // early: hands its event on; late: parks
	visit()
	visit() // early's event message finishes its wait
	if res := event(`{"id":"late"}`, time.Minute); res.Outcome.Kind != engine.KindAck {
		t.Fatalf("late event: %+v", res)
	}
	for _, id := range []string{"early", "late"} {
		st, err := s.Get(ctx, id)
		if err != nil || st.Step != "ship" || st.Status != workflow.Running {
			t.Errorf("run %s = %+v, %v", id, st, err)
		}
	}
	event(`{"id":"nobody"}`, time.Millisecond)
	expired := 0
	if !redistest.WaitFor(ctx, 3*time.Second, func() bool {
		n, err := s.expireKept(ctx, log)
		if err != nil {
			t.Fatal(err)
		}
		expired += n
		return expired > 0
	}) || expired != 1 {
		t.Errorf("expired %d kept events, want 1", expired)
	}
	if n := c.HLen(ctx, s.k.kept()).Val(); n != 0 {
		t.Errorf("%d events left kept", n)
	}
}
