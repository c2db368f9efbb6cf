package redislist

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
)

func TestEnvelopes(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
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
			r := receive(t, src)
			d := r.next(t)
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

func TestReliableSettlements(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	const dlFields = `"x-attempts":"1","x-dead-letter-reason":"bad","x-failed-at":"2025-01-02T03:04:05Z","x-original-key":"%s"`
	tests := []struct {
		name    string
		elem    string
		outcome engine.Outcome
		action  engine.Action // forced instead of the policy's decision when set
		list    []string      // the source list after settling
		dlq     []string
		keep    bool // the element stays in the processing list
		err     error
	}{
		{name: "ack", elem: "not json", outcome: engine.Ack()},
		{name: "drop", elem: `{"payload":1,"x":2}`, outcome: engine.Drop()},
		{name: "retry bare", elem: "not json", outcome: engine.Retry(),
			list: []string{`{"headers":{"x-retry-count":"1"},"payload":"not json"}`}},
		{name: "retry envelope", elem: `{"headers":{"h":"v","x-retry-count":"2"},"payload":{"n":1}}`, outcome: engine.Retry(),
			list: []string{`{"headers":{"h":"v","x-retry-count":"3"},"payload":{"n":1}}`}},
		{name: "dead letter", elem: `{"payload":1,"x":2}`, outcome: engine.DeadLetter("bad"),
			dlq: []string{`{"headers":{` + fmt.Sprintf(dlFields, "rows:dead letter") + `},"payload":{"payload":1,"x":2}}`}},
		{name: "leave unsupported", elem: "e", outcome: engine.Retry(), action: engine.ActLeave, keep: true, err: engine.ErrUnsupported},
		{name: "delay unsupported", elem: "e", outcome: engine.Retry(), action: engine.ActDelay, keep: true, err: engine.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c.Del(ctx, "dlq")
			key := "rows:" + tt.name
			src := newSource(t, c, Options{Key: key, Reliable: true, Consumer: "w1"})
			if !src.Capabilities().Ack {
				t.Fatal("reliable list without Ack capability")
			}
			lpush(t, c, key, tt.elem)
			r := receive(t, src)
			d := r.next(t)
			r.stop(t) // or it reads the copy straight back
			st := settlement(src, d, tt.outcome, 0)
			if tt.action != 0 {
				st.Action = tt.action
			}
			err := src.Settle(ctx, []engine.Settlement{st})
			if !errors.Is(err, tt.err) || (err != nil) != (tt.err != nil) {
				t.Fatalf("Settle = %v, want %v", err, tt.err)
			}
			wantList(t, c, key, tt.list...)
			wantList(t, c, "dlq", tt.dlq...)
			if tt.keep {
				wantList(t, c, src.opts.Processing, tt.elem)
			} else {
				wantList(t, c, src.opts.Processing)
			}
		})
	}
}

func TestSimpleSettlements(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	tests := []struct {
		name    string
		elem    string
		outcome engine.Outcome
		action  engine.Action
		list    []string
		dlq     []string
		err     error
	}{
		{name: "ack", elem: "a", outcome: engine.Ack()},
		{name: "drop", elem: "a", outcome: engine.Drop()},
		// The engine asks for a copy only under a cap or dead letter; settlement() declares both.
		{name: "retry", elem: `{"headers":{"h":"v"},"payload":"p"}`, outcome: engine.Retry(),
			list: []string{`{"headers":{"h":"v","x-retry-count":"1"},"payload":"p"}`}},
		{name: "dead letter", elem: "plain", outcome: engine.DeadLetter("bad"),
			dlq: []string{`{"headers":{"x-attempts":"1","x-dead-letter-reason":"bad","x-failed-at":"2025-01-02T03:04:05Z","x-original-key":"simple:dead letter"},"payload":"plain"}`}},
		{name: "leave unsupported", elem: "a", outcome: engine.Retry(), action: engine.ActLeave, err: engine.ErrUnsupported},
		{name: "delay unsupported", elem: "a", outcome: engine.Retry(), action: engine.ActDelay, err: engine.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c.Del(ctx, "dlq")
			key := "simple:" + tt.name
			src := newSource(t, c, Options{Key: key, Consumer: "w1"})
			if c := src.Capabilities(); c != (engine.Capabilities{Batch: src.opts.Batch}) {
				t.Fatalf("simple list capabilities %+v, want none but its batch", c)
			}
			lpush(t, c, key, tt.elem)
			r := receive(t, src)
			d := r.next(t)
			r.stop(t)
			wantList(t, c, key) // BRPOP took it: nothing left to settle
			st := settlement(src, d, tt.outcome, 3)
			if tt.action != 0 {
				st.Action = tt.action
			}
			err := src.Settle(ctx, []engine.Settlement{st})
			if !errors.Is(err, tt.err) || (err != nil) != (tt.err != nil) {
				t.Fatalf("Settle = %v, want %v", err, tt.err)
			}
			wantList(t, c, key, tt.list...)
			wantList(t, c, "dlq", tt.dlq...)
			if n, _ := c.Exists(ctx, key+":processing:w1").Result(); n != 0 {
				t.Fatal("a simple list created a processing list")
			}
		})
	}
}

func TestSettleBatchInOneScript(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	src := newSource(t, c, Options{Key: "batch", Reliable: true, Consumer: "w1", Batch: 10})
	lpush(t, c, "batch", "a", "b", "c", "d")
	r := receive(t, src)
	var ds []*engine.Delivery
	for range 4 {
		ds = append(ds, r.next(t))
	}
	r.stop(t)
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

func TestSettleDeadLetterWrongTypeKeepsElement(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	c.Set(ctx, "dlq", "not a list", 0)
	src := newSource(t, c, Options{Key: "wt", Reliable: true, Consumer: "w1"})
	lpush(t, c, "wt", "e")
	r := receive(t, src)
	d := r.next(t)
	err := src.Settle(ctx, []engine.Settlement{settlement(src, d, engine.DeadLetter("x"), 0)})
	if err == nil {
		t.Fatal("Settle into a string key succeeded")
	}
	// The LREM inside the MULTI ran, but the element must not be lost.
	wantList(t, c, src.opts.Processing, "e")
}

func TestRequeue(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	for _, reliable := range []bool{true, false} {
		key := "rq:" + map[bool]string{true: "reliable", false: "simple"}[reliable]
		src := newSource(t, c, Options{Key: key, Reliable: reliable, Consumer: "w1"})
		msgs := []*engine.Message{
			{Key: key, Headers: map[string]string{"x-retry-count": "1"}, Payload: []byte("one")},
			{Key: key, Headers: map[string]string{}, Payload: []byte(`{"n":2}`)},
		}
		if err := src.Requeue(ctx, msgs); err != nil {
			t.Fatal(err)
		}
		wantList(t, c, key, `{"n":2}`, `{"headers":{"x-retry-count":"1"},"payload":"one"}`)
		// Read back: the first requeued is read first, with its header.
		r := receive(t, src)
		d := r.next(t)
		if string(d.Payload) != "one" || d.Headers["x-retry-count"] != "1" {
			t.Fatalf("first read %q %v", d.Payload, d.Headers)
		}
		if d := r.next(t); string(d.Payload) != `{"n":2}` || len(d.Headers) != 0 {
			t.Fatalf("second read %q %v", d.Payload, d.Headers)
		}
	}
}

func TestSink(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
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
