package redispubsub

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/transports/transporttest"
)

func init() {
	pollInterval = 50 * time.Millisecond // quick stops
}

func newSource(t *testing.T, c redis.UniversalClient, opts Options) *Source {
	t.Helper()
	src, err := New(c, opts, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return src
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
	case <-time.After(transporttest.Timeout):
		t.Fatal("no message")
		return ""
	}
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
	_, c := redistest.Fresh(t)
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
			r := transporttest.Receive(t, src, 1)
			transporttest.WaitFor(t, "the subscription", src.Ready)
			publish(t, c, tt.channel, tt.msg)
			d := r.Next(t)
			if d.Key != tt.channel || d.ID != "" || !maps.Equal(d.Headers, tt.headers) || string(d.Payload) != tt.payload {
				t.Fatalf("delivery key %q id %q headers %v payload %q", d.Key, d.ID, d.Headers, d.Payload)
			}
			if err := r.Stop(t); err != nil {
				t.Fatal(err)
			}
			if src.Ready() {
				t.Fatal("ready after Receive returned")
			}
		})
	}
}

func TestRequeue(t *testing.T) {
	_, c := redistest.Fresh(t)
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
			r := transporttest.Receive(t, src, 1)
			transporttest.WaitFor(t, "the subscription", src.Ready)
			publish(t, c, "rs", "before")
			if d := r.Next(t); string(d.Payload) != "before" {
				t.Fatalf("got %q", d.Payload)
			}
			srv.Stop()
			transporttest.WaitFor(t, "not ready while Redis is down", func() bool { return !src.Ready() })
			srv.Restart(t)
			transporttest.WaitFor(t, "ready again", src.Ready)
			subs := c.PubSubNumSub(ctx, "rs").Val()["rs"] + c.PubSubNumPat(ctx).Val()
			if subs != 1 {
				t.Fatalf("%d subscriptions on the restarted server, want 1", subs)
			}
			publish(t, c, "rs", "after")
			if d := r.Next(t); string(d.Payload) != "after" || d.Key != "rs" {
				t.Fatalf("after restart got %q on %q", d.Payload, d.Key)
			}
			if err := r.Stop(t); err != nil {
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
	r := transporttest.Receive(t, src, 1)
	transporttest.WaitFor(t, "the subscription", src.Ready)
	// The server stops answering everyone for a while: the PING goes unanswered.
	if err := c.Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	transporttest.WaitFor(t, "not ready while the connection is silent", func() bool { return !src.Ready() })
	transporttest.WaitFor(t, "ready again after the pause", src.Ready)
	publish(t, c, "silent", "back")
	if d := r.Next(t); string(d.Payload) != "back" {
		t.Fatalf("got %q", d.Payload)
	}
}

func TestSink(t *testing.T) {
	_, c := redistest.Fresh(t)
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
	_, c := redistest.Fresh(t)
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
	transporttest.RunPipeline(t, p)
	transporttest.WaitFor(t, "the subscription", src.Ready)
	publish(t, c, "job.a", "fail")
	publish(t, c, "job.b", "later")
	transporttest.WaitFor(t, "a dead letter", func() bool { return c.XLen(ctx, "job.dlq").Val() == 1 })
	transporttest.WaitFor(t, "four handler runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 4 })
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
	case <-time.After(transporttest.Timeout):
		t.Fatal("Receive kept retrying an authentication error")
	}
}
