package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// listen subscribes the test itself to channels, as a second subscriber that sees what flowrun
// publishes, and returns the subscription once Redis has confirmed it.
func (e *redisEnv) listen(channels ...string) *redis.PubSub {
	e.t.Helper()
	ctx := context.Background()
	ps := e.rdb.Subscribe(ctx, channels...)
	e.t.Cleanup(func() { ps.Close() })
	for range channels {
		if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
			e.t.Fatalf("subscribe %v: %v", channels, err)
		}
	}
	return ps
}

// heard returns the next n messages of ps as "channel payload" lines.
func heard(t *testing.T, ps *redis.PubSub, n int) []string {
	t.Helper()
	var got []string
	ch := ps.Channel()
	timeout := time.After(5 * time.Second)
	for len(got) < n {
		select {
		case m := <-ch:
			got = append(got, m.Channel+" "+m.Payload)
		case <-timeout:
			t.Fatalf("heard %d messages, want %d: %q", len(got), n, got)
		}
	}
	return got
}

// nothingMore fails when ps receives anything within a short while.
func nothingMore(t *testing.T, ps *redis.PubSub) {
	t.Helper()
	select {
	case m := <-ps.Channel():
		t.Errorf("unexpected message on %s: %q", m.Channel, m.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

// subscribers waits until channel has n subscribers.
func (e *redisEnv) subscribers(channel string, n int64) {
	e.t.Helper()
	eventually(e.t, 10*time.Second, "subscribers on "+channel, func() bool {
		m, err := e.rdb.PubSubNumSub(context.Background(), channel).Result()
		return err == nil && m[channel] == n
	})
}

// patterns waits until the server has n pattern subscriptions.
func (e *redisEnv) patterns(n int64) {
	e.t.Helper()
	eventually(e.t, 10*time.Second, "pattern subscriptions", func() bool {
		got, err := e.rdb.PubSubNumPat(context.Background()).Result()
		return err == nil && got == n
	})
}

func (e *redisEnv) publish(channel, msg string) {
	e.t.Helper()
	if err := e.rdb.Publish(context.Background(), channel, msg).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// deadLetters returns a dead-letter stream's entries.
func (e *redisEnv) deadLetters(stream string) []redis.XMessage {
	e.t.Helper()
	xs, err := e.rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return xs
}

// checkStreamDeadLetter asserts one dead-letter stream entry: its payload field and exactly
// the headers want plus x-dead-letter-reason and x-failed-at.
func checkStreamDeadLetter(t *testing.T, x redis.XMessage, payload string, want map[string]string, since time.Time) {
	t.Helper()
	h := map[string]string{}
	for k, v := range x.Values {
		s, _ := v.(string)
		h[k] = s
	}
	if h["payload"] != payload {
		t.Errorf("dead-letter payload %q, want %q", h["payload"], payload)
	}
	delete(h, "payload")
	checkDeadLetterHeaders(t, h, want, since)
}

// TestPubSubChannels: messages on a channel are handled; a retry under max_attempts is
// published back to the same channel as an envelope with x-retry-count, and the last failure
// lands in the dead-letter stream.
func TestPubSubChannels(t *testing.T) {
	t.Parallel()
	e := newRedisEnv(t)
	cfg := e.config(`pipeline "events" {
  source "pubsub" {
    channels = ["events", "alerts"]
  }
  concurrency  = 1
  max_attempts = 2
  dead_letter  = "events.dlq"
  rule "bad" {
    when = "raw == 'fail'"
` + seenEmit + `    outcome = "retry"
  }
  rule "ok" {
` + seenEmit + `    outcome = "ack"
  }
}
`)
	ps := e.listen("events")
	p := start(t, "run", cfg)
	e.subscribers("events", 2)
	e.subscribers("alerts", 1)
	since := time.Now()
	e.publish("events", "hello")
	e.publish("alerts", `{"headers":{"k":"v"},"payload":{"a":1}}`)
	e.publish("events", "fail")
	eventually(t, 5*time.Second, "the dead letter", func() bool {
		return len(e.lines("seen.jsonl")) >= 4 && len(e.deadLetters("events.dlq")) >= 1
	})
	stop(t, p)

	// One publishing connection and one handler at a time: the order is the publishing order.
	want := []string{
		seen("events", 1, "{}", "hello"),
		seen("alerts", 1, `{"k":"v"}`, `{"a":1}`),
		seen("events", 1, "{}", "fail"),
		seen("events", 2, `{"x-retry-count":"1"}`, "fail"),
	}
	if got := e.lines("seen.jsonl"); !slices.Equal(got, want) {
		t.Errorf("seen.jsonl:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantHeard := []string{"events hello", "events fail", `events {"headers":{"x-retry-count":"1"},"payload":"fail"}`}
	if got := heard(t, ps, 3); !slices.Equal(got, wantHeard) {
		t.Errorf("the second subscriber heard %q, want %q", got, wantHeard)
	}
	nothingMore(t, ps)
	dl := e.deadLetters("events.dlq")
	if len(dl) != 1 {
		t.Fatalf("dead-letter stream has %d entries, want 1", len(dl))
	}
	checkStreamDeadLetter(t, dl[0], "fail",
		map[string]string{"x-original-key": "events", "x-attempts": "2", "x-retry-count": "1"}, since)
	if got := e.keys(); !slices.Equal(got, []string{"events.dlq"}) {
		t.Errorf("keys %q, want only the dead-letter stream", got)
	}
}

// TestPubSubPatternsRetryTo: under patterns, copies go to retry_to (here a channel the pattern
// also matches, so they come back), never to the channel the message came from.
func TestPubSubPatternsRetryTo(t *testing.T) {
	t.Parallel()
	e := newRedisEnv(t)
	cfg := e.config(`pipeline "orders" {
  source "pubsub" {
    patterns = ["orders.*"]
  }
  concurrency  = 1
  retry_to     = "orders.retry"
  max_attempts = 3
  dead_letter  = "orders.dlq"
  rule "bad" {
    when = "raw == 'fail'"
` + seenEmit + `    outcome = "retry"
  }
  rule "ok" {
` + seenEmit + `    outcome = "ack"
  }
}
`)
	ps := e.listen("orders.eu", "orders.retry")
	p := start(t, "run", cfg)
	e.patterns(1)
	since := time.Now()
	e.publish("orders.us", "fine")
	e.publish("orders.eu", "fail")
	eventually(t, 5*time.Second, "the dead letter", func() bool {
		return len(e.lines("seen.jsonl")) >= 4 && len(e.deadLetters("orders.dlq")) >= 1
	})
	stop(t, p)

	want := []string{
		seen("orders.us", 1, "{}", "fine"),
		seen("orders.eu", 1, "{}", "fail"),
		seen("orders.retry", 2, `{"x-retry-count":"1"}`, "fail"),
		seen("orders.retry", 3, `{"x-retry-count":"2"}`, "fail"),
	}
	if got := e.lines("seen.jsonl"); !slices.Equal(got, want) {
		t.Errorf("seen.jsonl:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantHeard := []string{
		"orders.eu fail",
		`orders.retry {"headers":{"x-retry-count":"1"},"payload":"fail"}`,
		`orders.retry {"headers":{"x-retry-count":"2"},"payload":"fail"}`,
	}
	if got := heard(t, ps, 3); !slices.Equal(got, wantHeard) {
		t.Errorf("the second subscriber heard %q, want %q", got, wantHeard)
	}
	nothingMore(t, ps)
	dl := e.deadLetters("orders.dlq")
	if len(dl) != 1 {
		t.Fatalf("dead-letter stream has %d entries, want 1", len(dl))
	}
	checkStreamDeadLetter(t, dl[0], "fail",
		map[string]string{"x-original-key": "orders.retry", "x-attempts": "3", "x-retry-count": "2"}, since)
}

// TestPubSubHeldCopyPublishedAtStop: a retry_after copy still held at a clean stop is published
// at once, to the channel (or retry_to).
func TestPubSubHeldCopyPublishedAtStop(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, source, extra, publishTo, heardOn string
	}{
		{"channels", `channels = ["events"]`, "", "events", "events"},
		{"patterns", `patterns = ["ev.*"]`, `  retry_to = "ev-later"` + "\n", "ev.1", "ev-later"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newRedisEnv(t)
			cfg := e.config(`pipeline "events" {
  source "pubsub" {
    ` + c.source + `
  }
` + c.extra + `  rule "later" {
` + seenEmit + `    outcome = "retry_after('1h')"
  }
}
`)
			ps := e.listen(c.heardOn)
			p := start(t, "run", cfg)
			if c.name == "patterns" {
				e.patterns(1)
			} else {
				e.subscribers(c.publishTo, 2)
			}
			e.publish(c.publishTo, `{"headers":{"k":"v"},"payload":"x"}`)
			eventually(t, 5*time.Second, "the message handled", func() bool { return len(e.lines("seen.jsonl")) >= 1 })
			stop(t, p)
			skip := 0
			if c.heardOn == c.publishTo {
				skip = 1 // the original, heard too
			}
			got := heard(t, ps, skip+1)[skip:]
			want := []string{c.heardOn + ` {"headers":{"k":"v","x-retry-count":"1"},"payload":"x"}`}
			if !slices.Equal(got, want) {
				t.Errorf("heard %q at the stop, want %q", got, want)
			}
			nothingMore(t, ps)
		})
	}
}

// TestPubSubResubscribesAfterRedisRestart: after the server restarts, flowrun subscribes again
// on its own and handles what is published then.
func TestPubSubResubscribesAfterRedisRestart(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, source, channel string }{
		{"channels", `channels = ["events"]`, "events"},
		{"patterns", `patterns = ["ev*"]`, "events"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newRedisEnv(t)
			cfg := e.config(`pipeline "events" {
  source "pubsub" {
    ` + c.source + `
  }
  rule "all" {
` + seenEmit + `    outcome = "ack"
  }
}
`)
			p := start(t, "run", cfg)
			up := func() {
				if c.name == "patterns" {
					e.patterns(1)
				} else {
					e.subscribers(c.channel, 1)
				}
			}
			up()
			e.publish(c.channel, "before")
			eventually(t, 5*time.Second, "the first message", func() bool { return len(e.lines("seen.jsonl")) >= 1 })

			e.srv.Restart(t)
			up()
			e.publish(c.channel, "after")
			eventually(t, 5*time.Second, "the message after the restart", func() bool { return len(e.lines("seen.jsonl")) >= 2 })
			stop(t, p)

			want := []string{seen(c.channel, 1, "{}", "before"), seen(c.channel, 1, "{}", "after")}
			if got := e.lines("seen.jsonl"); !slices.Equal(got, want) {
				t.Errorf("seen.jsonl:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			// Logged once per state change, not once per attempt.
			logs := p.err.String()
			if n := strings.Count(logs, "pubsub subscription failing"); n != 1 {
				t.Errorf("%d 'failing' lines, want 1:\n%s", n, logs)
			}
			if n := strings.Count(logs, "pubsub subscription recovered"); n != 1 {
				t.Errorf("%d 'recovered' lines, want 1:\n%s", n, logs)
			}
		})
	}
}

// TestValidatePubSubRetryTo: a pattern subscription that can retry needs retry_to, and the
// error points at the pipeline that lacks it; retry_to on channels is refused where it stands.
func TestValidatePubSubRetryTo(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		code       int
		err        string // "LINE:COL: error: " prefix and a text, or "" for valid
		text       string
	}{
		{
			name: "patterns that retry without retry_to",
			body: `pipeline "orders" {
  source "pubsub" {
    patterns = ["orders.*"]
  }
  rule "r" {
    outcome = "attempt < 3 ? retry : drop"
  }
}
`,
			code: 1, err: "5:1: error: ", text: "retry_to",
		},
		{
			name: "retry_after counts as a retry",
			body: `pipeline "orders" {
  source "pubsub" {
    patterns = ["orders.*"]
  }
  rule "r" {
    outcome = "retry_after('1s')"
  }
}
`,
			code: 1, err: "5:1: error: ", text: "retry_to",
		},
		{
			name: "retry_to on channels",
			body: `pipeline "orders" {
  source "pubsub" {
    channels = ["orders"]
  }
  retry_to = "orders.retry"
  rule "r" {
    outcome = "retry"
  }
}
`,
			code: 1, err: "9:3: error: ", text: "retry_to",
		},
		{
			name: "patterns that only ack",
			body: `pipeline "orders" {
  source "pubsub" {
    patterns = ["orders.*"]
  }
  rule "r" {
    outcome = "ack"
  }
}
`,
		},
		{
			name: "patterns with retry_to",
			body: `pipeline "orders" {
  source "pubsub" {
    patterns = ["orders.*"]
  }
  retry_to = "orders.retry"
  rule "r" {
    outcome = "retry"
  }
}
`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			// The redis block takes lines 1–3 and a blank line: the pipeline starts on line 5.
			path := writeFile(t, dir, "flow.hcl", "redis \"main\" {\n  url = \"redis://127.0.0.1:1/0\"\n}\n\n"+c.body)
			r := flowrun(t, "", "validate", dir)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr:\n%s", r.code, c.code, r.stdout, r.stderr)
			}
			if c.code == 0 {
				if r.stdout != "ok: 1 pipelines\n" {
					t.Errorf("stdout %q", r.stdout)
				}
				return
			}
			lines := errorLines(r.stderr)
			prefix := path + ":" + c.err
			if len(lines) != 1 || !strings.HasPrefix(lines[0], prefix) || !strings.Contains(lines[0], c.text) {
				t.Errorf("want one error %q…%q, got:\n%s", prefix, c.text, r.stderr)
			}
		})
	}
}
