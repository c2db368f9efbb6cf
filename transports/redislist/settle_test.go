package redislist

import (
	"context"
	"maps"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

func TestEnvelopes(t *testing.T) {
	_, c := redistest.Fresh(t)
	tests := []struct {
		name    string
		elem    string
		headers map[string]string
		payload string
	}{
		{"bare text", "not json", map[string]string{}, "not json"},
		{"object with other keys is bare", `{"payload":1,"x":2}`, map[string]string{}, `{"payload":1,"x":2}`},
		{"envelope without headers", `{"payload":{"n": 1}}`, map[string]string{}, `{"n":1}`},
		{"envelope with headers", `{"headers":{"a":"b"},"payload":"text"}`, map[string]string{"a": "b"}, "text"},
		{"spaced envelope", ` { "payload" : [1, 2] } `, map[string]string{}, `[1,2]`},
		{"bare json number", `42`, map[string]string{}, `42`},
		{"empty element", ``, map[string]string{}, ``},
		{"invalid utf-8", "\xff\xfe", map[string]string{}, "\xff\xfe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "env:" + tt.name
			src := newSource(t, c, Options{Key: key, Reliable: true, Consumer: "w1"})
			lpush(t, c, key, tt.elem)
			r := transporttest.Receive(t, src, src.opts.Batch)
			d := r.Next(t)
			if d.Key != key || d.ID != "" || !maps.Equal(d.Headers, tt.headers) || string(d.Payload) != tt.payload {
				t.Fatalf("delivery key %q id %q headers %v payload %q; want %q, \"\", %v, %q",
					d.Key, d.ID, d.Headers, d.Payload, key, tt.headers, tt.payload)
			}
			if e, _ := Element(d); e != tt.elem {
				t.Fatalf("token element %q, want %q", e, tt.elem)
			}
			wantList(t, c, src.opts.Processing, tt.elem)
			if err := src.Settle(context.Background(), []engine.Settlement{{Delivery: d, Action: engine.ActAck}}); err != nil {
				t.Fatal(err)
			}
			// The LREM matched the element exactly as read, envelope or not.
			wantList(t, c, src.opts.Processing)
			wantList(t, c, key)
		})
	}
}

// settlement builds what the engine's policy decides for d and outcome o (dead letter "dlq").
func settlement(src *Source, d *engine.Delivery, o engine.Outcome, maxAttempts int) engine.Settlement {
	d.Attempt = d.RetryCount() + 1
	p := engine.Policy{MaxAttempts: maxAttempts, DeadLetter: "dlq", Caps: src.Capabilities()}
	return p.Decide(d, o, nil, time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)).Settlement
}

func TestSettleBatchInOneScript(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	src := newSource(t, c, Options{Key: "batch", Reliable: true, Consumer: "w1", Batch: 10})
	lpush(t, c, "batch", "a", "b", "c", "d")
	r := transporttest.Receive(t, src, src.opts.Batch)
	var ds []*engine.Delivery
	for range 4 {
		ds = append(ds, r.Next(t))
	}
	r.Stop(t)
	batch := []engine.Settlement{
		settlement(src, ds[0], engine.Ack(), 0),
		settlement(src, ds[1], engine.Retry(), 0),
		settlement(src, ds[2], engine.DeadLetter("x"), 0),
		settlement(src, ds[3], engine.Drop(), 0),
	}
	settleScript.Load(ctx, c) // as after the first batch: EVALSHA finds it
	before := scriptCalls(t, c)
	if err := src.Settle(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// Settling again (the engine retrying after a lost reply) writes no second copy.
	if err := src.Settle(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if n := scriptCalls(t, c) - before; n != 1 {
		t.Fatalf("%d settle scripts run for one batch (settled twice), want 1", n)
	}
	// Even a resend whose tokens forgot everything (a lost reply) writes nothing twice: the
	// script finds the elements gone from the processing list.
	fresh := make([]engine.Settlement, len(batch))
	for i, st := range batch {
		d := *st.Delivery
		d.Token = string(st.Delivery.Token.(*token).elem)
		st.Delivery = &d
		fresh[i] = st
	}
	if err := src.Settle(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	wantList(t, c, src.opts.Processing)
	wantList(t, c, "batch", `{"headers":{"x-retry-count":"1"},"payload":"b"}`)
	if n := llen(t, c, "dlq"); n != 1 {
		t.Fatalf("dlq has %d elements, want 1", n)
	}
}

var scriptStat = regexp.MustCompile(`cmdstat_eval(?:sha)?:calls=(\d+)`)

// scriptCalls is how many scripts (EVAL, EVALSHA) the server has run.
func scriptCalls(t *testing.T, c interface {
	Info(context.Context, ...string) *redis.StringCmd
}) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range scriptStat.FindAllStringSubmatch(info, -1) {
		k, _ := strconv.Atoi(m[1])
		n += k
	}
	return n
}

func TestSink(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	s := NewSink(c)
	err := s.Publish(ctx,
		&engine.Message{Key: "out:a", Payload: []byte("1")},
		&engine.Message{Key: "out:a", Headers: map[string]string{"k": "v"}, Payload: []byte("two")},
		&engine.Message{Key: "out:b", Payload: []byte(`{"payload":3}`)},
	)
	if err != nil {
		t.Fatal(err)
	}
	wantList(t, c, "out:a", `{"headers":{"k":"v"},"payload":"two"}`, "1")
	// A header-less payload that would read back as an envelope is wrapped to stay faithful.
	got := lrange(t, c, "out:b")
	if len(got) != 1 {
		t.Fatalf("out:b = %q", got)
	}
	if _, p := codec.DecodeEnvelope([]byte(got[0])); string(p) != `{"payload":3}` {
		t.Fatalf("out:b reads back as %q", p)
	}
	c.Set(ctx, "out:str", "x", 0)
	if err := s.Publish(ctx, &engine.Message{Key: "out:str", Payload: []byte("1")}); err == nil {
		t.Fatal("publishing to a string key succeeded")
	}
}
