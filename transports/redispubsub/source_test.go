package redispubsub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/internal/sourcetest"
	"github.com/flowrun/flowrun/transports/redisconn"
)

const waitTimeout = 10 * time.Second

func init() {
	pollInterval = 50 * time.Millisecond // quick stops
}

type receiver struct {
	ch     chan *engine.Delivery
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func receive(t *testing.T, src *Source) *receiver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	feed, ch := sourcetest.Flatten(context.WithoutCancel(ctx), 1)
	r := &receiver{ch: ch, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Receive(ctx, feed) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *receiver) stop(t *testing.T) error {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if !errors.Is(err, context.Canceled) {
				r.err = err
			}
		case <-time.After(waitTimeout):
			t.Fatal("Receive did not return after cancel")
		}
	})
	return r.err
}

func (r *receiver) next(t *testing.T) *engine.Delivery {
	t.Helper()
	select {
	case d := <-r.ch:
		return d
	case <-time.After(waitTimeout):
		t.Fatal("no delivery")
		return nil
	}
}

func newSource(t *testing.T, c redis.UniversalClient, opts Options) *Source {
	t.Helper()
	src, err := New(c, opts, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !redistest.WaitFor(context.Background(), waitTimeout, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func publish(t *testing.T, c redis.UniversalClient, ch, msg string) {
	t.Helper()
	if err := c.Publish(context.Background(), ch, msg).Err(); err != nil {
		t.Fatal(err)
	}
}

// watch subscribes a plain client to ch and returns its message channel, once confirmed.
func watch(t *testing.T, c *redis.Client, ch string) <-chan *redis.Message {
	t.Helper()
	ps := c.Subscribe(context.Background(), ch)
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(context.Background()); err != nil { // the confirmation
		t.Fatal(err)
	}
	return ps.Channel()
}

func nextMsg(t *testing.T, ch <-chan *redis.Message) string {
	t.Helper()
	select {
	case m := <-ch:
		return m.Payload
	case <-time.After(waitTimeout):
		t.Fatal("no message")
		return ""
	}
}

var publishStat = regexp.MustCompile(`cmdstat_publish:calls=(\d+)`)

func publishCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := publishStat.FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		ok   bool
	}{
		{"channels", Options{Channels: []string{"a"}}, true},
		{"patterns", Options{Patterns: []string{"a.*"}, RetryTo: "r"}, true},
		{"both", Options{Channels: []string{"a"}, Patterns: []string{"b*"}}, false},
		{"neither", Options{}, false},
		{"empty name", Options{Channels: []string{""}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.opts.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestChannelsAndPatterns(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	tests := []struct {
		name    string
		opts    Options
		channel string
		msg     string
		headers map[string]string
		payload string
	}{
		{"channel bare", Options{Channels: []string{"a", "b"}}, "b", "hello", map[string]string{}, "hello"},
		{"channel envelope", Options{Channels: []string{"a"}}, "a", `{"headers":{"k":"v"},"payload":{"n":1}}`,
			map[string]string{"k": "v"}, `{"n":1}`},
		{"channel json not envelope", Options{Channels: []string{"a"}}, "a", `{"payload":1,"x":2}`,
			map[string]string{}, `{"payload":1,"x":2}`},
		{"pattern", Options{Patterns: []string{"ev.*"}, RetryTo: "ev-retry"}, "ev.created", "x",
			map[string]string{}, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource(t, c, tt.opts)
			if src.Capabilities() != (engine.Capabilities{}) {
				t.Fatalf("capabilities %+v, want none", src.Capabilities())
			}
			r := receive(t, src)
			waitFor(t, "the subscription", src.Ready)
			publish(t, c, tt.channel, tt.msg)
			d := r.next(t)
			if d.Key != tt.channel || d.ID != "" || !maps.Equal(d.Headers, tt.headers) || string(d.Payload) != tt.payload {
				t.Fatalf("delivery key %q id %q headers %v payload %q", d.Key, d.ID, d.Headers, d.Payload)
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if src.Ready() {
				t.Fatal("ready after Receive returned")
			}
		})
	}
}

func TestSettle(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name     string
		opts     Options
		channel  string // published on
		msg      string
		outcome  engine.Outcome
		action   engine.Action // forced when set
		watch    string        // a channel expected to receive the copy
		copy     string
		dlq      []any // the dead-letter stream entry's fields
		err      error
		publish0 bool // no PUBLISH at all
	}{
		{name: "ack", opts: Options{Channels: []string{"s.ack"}}, channel: "s.ack", msg: "m", outcome: engine.Ack(), publish0: true},
		{name: "drop", opts: Options{Channels: []string{"s.drop"}}, channel: "s.drop", msg: "m", outcome: engine.Drop(), publish0: true},
		{name: "retry to own channel", opts: Options{Channels: []string{"s.retry"}}, channel: "s.retry", msg: "m",
			outcome: engine.Retry(), watch: "s.retry", copy: `{"headers":{"x-retry-count":"1"},"payload":"m"}`},
		{name: "retry to retry_to", opts: Options{Patterns: []string{"p.*"}, RetryTo: "p-retry"}, channel: "p.one",
			msg: `{"headers":{"h":"v"},"payload":[1]}`, outcome: engine.Retry(), watch: "p-retry",
			copy: `{"headers":{"h":"v","x-retry-count":"1"},"payload":[1]}`},
		{name: "dead letter", opts: Options{Channels: []string{"s.dl"}}, channel: "s.dl",
			msg: `{"headers":{"h":"v"},"payload":"body"}`, outcome: engine.DeadLetter("bad"),
			dlq: []any{"h", "v", "x-attempts", "1", "x-dead-letter-reason", "bad", "x-failed-at", "2025-01-02T03:04:05Z",
				"x-original-key", "s.dl", "payload", "body"}},
		{name: "leave unsupported", opts: Options{Channels: []string{"s.l"}}, channel: "s.l", msg: "m",
			outcome: engine.Retry(), action: engine.ActLeave, err: engine.ErrUnsupported, publish0: true},
		{name: "delay unsupported", opts: Options{Channels: []string{"s.d"}}, channel: "s.d", msg: "m",
			outcome: engine.Retry(), action: engine.ActDelay, err: engine.ErrUnsupported, publish0: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.Del(ctx, "dlq")
			src := newSource(t, c, tt.opts)
			r := receive(t, src)
			waitFor(t, "the subscription", src.Ready)
			publish(t, c, tt.channel, tt.msg)
			d := r.next(t)
			r.stop(t)
			var copies <-chan *redis.Message
			if tt.watch != "" {
				copies = watch(t, c, tt.watch)
			}
			d.Attempt = 1
			// A cap is declared, so the policy asks for the copy (SPEC §5).
			p := engine.Policy{MaxAttempts: 3, DeadLetter: "dlq", Caps: src.Capabilities()}
			st := p.Decide(d, tt.outcome, nil, now).Settlement
			if tt.action != 0 {
				st.Action = tt.action
			}
			before := publishCalls(t, c)
			err := src.Settle(ctx, []engine.Settlement{st})
			if !errors.Is(err, tt.err) || (err != nil) != (tt.err != nil) {
				t.Fatalf("Settle = %v, want %v", err, tt.err)
			}
			if tt.publish0 {
				if n := publishCalls(t, c) - before; n != 0 {
					t.Fatalf("%d PUBLISH, want none", n)
				}
			}
			if tt.copy != "" {
				if got := nextMsg(t, copies); got != tt.copy {
					t.Fatalf("copy %s, want %s", got, tt.copy)
				}
			}
			entries, err := c.XRange(ctx, "dlq", "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			if tt.dlq == nil {
				if len(entries) != 0 {
					t.Fatalf("dead letters %v, want none", entries)
				}
				return
			}
			if len(entries) != 1 {
				t.Fatalf("%d dead letters, want 1", len(entries))
			}
			// Field order as written: XRANGE gives a map, so read the raw reply.
			raw, err := c.Do(ctx, "XRANGE", "dlq", "-", "+").Slice()
			if err != nil {
				t.Fatal(err)
			}
			fields := raw[0].([]any)[1].([]any)
			if !slices.Equal(fields, tt.dlq) {
				t.Fatalf("dead letter fields %q, want %q", fields, tt.dlq)
			}
		})
	}
}

func TestRequeue(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	msgs := []*engine.Message{
		{Key: "q.a", Headers: map[string]string{"x-retry-count": "2"}, Payload: []byte("one")},
		{Key: "q.b", Headers: map[string]string{}, Payload: []byte("two")},
	}
	// Channels: each copy back to the channel it came from.
	a, b := watch(t, c, "q.a"), watch(t, c, "q.b")
	src := newSource(t, c, Options{Channels: []string{"q.a", "q.b"}})
	if err := src.Requeue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if got := nextMsg(t, a); got != `{"headers":{"x-retry-count":"2"},"payload":"one"}` {
		t.Fatalf("q.a got %s", got)
	}
	if got := nextMsg(t, b); got != "two" {
		t.Fatalf("q.b got %s", got)
	}
	// Patterns: every copy to retry_to.
	rt := watch(t, c, "q-retry")
	src = newSource(t, c, Options{Patterns: []string{"q.*"}, RetryTo: "q-retry"})
	if err := src.Requeue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if got := []string{nextMsg(t, rt), nextMsg(t, rt)}; got[0] != `{"headers":{"x-retry-count":"2"},"payload":"one"}` || got[1] != "two" {
		t.Fatalf("q-retry got %q", got)
	}
}

func TestResubscribeAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	for _, opts := range []Options{{Channels: []string{"rs"}}, {Patterns: []string{"r*"}, RetryTo: "x"}} {
		t.Run(fmt.Sprint(opts.Channels, opts.Patterns), func(t *testing.T) {
			src := newSource(t, c, opts)
			r := receive(t, src)
			waitFor(t, "the subscription", src.Ready)
			publish(t, c, "rs", "before")
			if d := r.next(t); string(d.Payload) != "before" {
				t.Fatalf("got %q", d.Payload)
			}
			srv.Stop()
			waitFor(t, "not ready while Redis is down", func() bool { return !src.Ready() })
			srv.Restart(t)
			waitFor(t, "ready again", src.Ready)
			subs := c.PubSubNumSub(ctx, "rs").Val()["rs"] + c.PubSubNumPat(ctx).Val()
			if subs != 1 {
				t.Fatalf("%d subscriptions on the restarted server, want 1", subs)
			}
			publish(t, c, "rs", "after")
			if d := r.next(t); string(d.Payload) != "after" || d.Key != "rs" {
				t.Fatalf("after restart got %q on %q", d.Payload, d.Key)
			}
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSilentConnectionIsReplaced(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	oldQuiet, oldPing := quietBeforePing, pingTimeout
	quietBeforePing, pingTimeout = 100*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { quietBeforePing, pingTimeout = oldQuiet, oldPing })

	src := newSource(t, c, Options{Channels: []string{"silent"}})
	r := receive(t, src)
	waitFor(t, "the subscription", src.Ready)
	// The server stops answering everyone for a while: the PING goes unanswered.
	if err := c.Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "not ready while the connection is silent", func() bool { return !src.Ready() })
	waitFor(t, "ready again after the pause", src.Ready)
	publish(t, c, "silent", "back")
	if d := r.next(t); string(d.Payload) != "back" {
		t.Fatalf("got %q", d.Payload)
	}
}

func TestSink(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	a, b := watch(t, c, "sink.a"), watch(t, c, "sink.b")
	err := NewSink(c).Publish(context.Background(),
		&engine.Message{Key: "sink.a", Payload: []byte("1")},
		&engine.Message{Key: "sink.b", Headers: map[string]string{"k": "v"}, Payload: []byte("two")},
		&engine.Message{Key: "sink.a", Payload: []byte("3")},
		&engine.Message{Key: "nobody", Payload: []byte("4")},
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{nextMsg(t, a), nextMsg(t, a)}; !slices.Equal(got, []string{"1", "3"}) {
		t.Fatalf("sink.a got %q", got)
	}
	if got := nextMsg(t, b); got != `{"headers":{"k":"v"},"payload":"two"}` {
		t.Fatalf("sink.b got %s", got)
	}
}

// TestEngineRetriesAndDeadLetters runs the engine over a pattern subscription: retry copies go
// to retry_to (which the pattern also matches here), the cap sends the last attempt into the
// dead-letter stream, and retry_after's runtime copy comes back.
func TestEngineRetriesAndDeadLetters(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	src := newSource(t, c, Options{Patterns: []string{"job.*"}, RetryTo: "job.retry"})
	var mu sync.Mutex
	var seen []string
	p := &engine.Pipeline{Name: "ps", Source: src, Concurrency: 2, MaxAttempts: 2, DeadLetter: "job.dlq",
		ShutdownTimeout: 5 * time.Second, Logger: zerolog.Nop(),
		Handler: engine.HandlerFunc(func(ctx context.Context, d *engine.Delivery) engine.Result {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s@%s/%d", d.Payload, d.Key, d.Attempt))
			mu.Unlock()
			switch {
			case string(d.Payload) == "fail":
				return engine.Result{Outcome: engine.Retry()}
			case string(d.Payload) == "later" && d.Attempt == 1:
				return engine.Result{Outcome: engine.RetryAfter(50 * time.Millisecond)}
			}
			return engine.Result{Outcome: engine.Ack()}
		})}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- engine.New(engine.Options{}, p).Run(runCtx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the subscription", src.Ready)
	publish(t, c, "job.a", "fail")
	publish(t, c, "job.b", "later")
	waitFor(t, "a dead letter", func() bool { return c.XLen(ctx, "job.dlq").Val() == 1 })
	waitFor(t, "four handler runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 4 })
	mu.Lock()
	got := slices.Sorted(slices.Values(seen))
	mu.Unlock()
	want := []string{"fail@job.a/1", "fail@job.retry/2", "later@job.b/1", "later@job.retry/2"}
	if !slices.Equal(got, want) {
		t.Fatalf("handled %q, want %q", got, want)
	}
	e := c.XRange(ctx, "job.dlq", "-", "+").Val()[0].Values
	if e["payload"] != "fail" || e["x-attempts"] != "2" || e["x-original-key"] != "job.retry" || e["x-retry-count"] != "1" {
		t.Fatalf("dead letter %v", e)
	}
}

func TestAuthErrorEndsReceive(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret-pw")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "wrong-pw"})
	t.Cleanup(func() { c.Close() })
	src := newSource(t, c, Options{Channels: []string{"a"}})
	done := make(chan error, 1)
	go func() { done <- src.Receive(context.Background(), engine.NewQueue(1)) }()
	select {
	case err := <-done:
		if !redisconn.IsAuthError(err) || strings.Contains(err.Error(), "wrong-pw") {
			t.Fatalf("Receive = %v, want a redacted auth error", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Receive kept retrying an authentication error")
	}
}
