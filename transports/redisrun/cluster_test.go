package redisrun

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/transports/transporttest"
	"github.com/flowrun/flowrun/workflow"
)

// On a Redis Cluster every script's keys share the workflow's slot (a CROSSSLOT error would
// show one that does not), and a dead letter configured on another slot is written on its own.
func TestRunOnCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	ctx := context.Background()
	c, err := redisconn.New(redisconn.Options{Cluster: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := testGraph()
	g.Steps[0].Delay = 10 * time.Millisecond // reserve: entered through the delayed set
	s := NewStore(c, g)
	const dlq = "order.dlq"
	if redisconn.SameSlot(c, dlq, s.k.run("x")) {
		t.Fatal("test needs a dead letter on another slot")
	}
	s.DeadLetter = dlq
	if res := s.StartHandler(nil, "fp").Handle(ctx, &engine.Delivery{Message: engine.Message{
		Key: "orders", ID: "1-0", Headers: map[string]string{}, Payload: []byte(`{}`)}}); res.Err != nil {
		t.Fatal(res.Err)
	}
	id := "orders/1-0"
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.RunTimers(tctx, log)

	src := s.StepSource("reserve", StepOptions{Consumer: "w", Block: 50 * time.Millisecond}, log)
	r := transporttest.Receive(t, src, 10)
	p := engine.Policy{DeadLetter: dlq, Caps: src.Capabilities()}
	settle := func(d *engine.Delivery, o engine.Outcome) {
		t.Helper()
		if err := src.Settle(ctx, []engine.Settlement{p.Decide(d, o, nil, time.Now()).Settlement}); err != nil {
			t.Fatal(err)
		}
	}
	d := r.Next(t)
	settle(d, handled(g, d, func(context.Context, *engine.Delivery) engine.Result { return engine.Result{Outcome: engine.Ack()} }).Outcome)

	src2 := s.StepSource("charge", StepOptions{Consumer: "w", Block: 50 * time.Millisecond}, log)
	r2 := transporttest.Receive(t, src2, 10)
	d = r2.Next(t)
	res := handled(g, d, func(context.Context, *engine.Delivery) engine.Result { return engine.Result{Outcome: engine.Retry()} })
	if err := src2.Settle(ctx, []engine.Settlement{p.Decide(d, res.Outcome, nil, time.Now()).Settlement}); err != nil {
		t.Fatal(err)
	}
	d = r2.Next(t)
	res = handled(g, d, func(context.Context, *engine.Delivery) engine.Result {
		return engine.Result{Outcome: engine.DeadLetter("no")}
	})
	if err := src2.Settle(ctx, []engine.Settlement{p.Decide(d, res.Outcome, nil, time.Now()).Settlement}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Get(ctx, id)
	if err != nil || st.Status != workflow.Compensating || st.Step != "release" {
		t.Fatalf("run = %+v, %v", st, err)
	}
	if dls, n, err := s.DeadLetters(ctx, 0, nil); err != nil || n != 1 || dls[0].Message.Headers[engine.HeaderRunID] != id {
		t.Fatalf("dead letters = %v %d %v", dls, n, err)
	}
	if err := s.Cancel(ctx, id); !errors.Is(err, ErrNotActive) {
		t.Errorf("cancel of a compensating run = %v", err)
	}
	if _, _, err := s.Counts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.hygiene(ctx); err != nil {
		t.Fatal(err)
	}
}
