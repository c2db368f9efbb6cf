package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// redisEnv is one test's redis-server, a client on it and a folder for the config and the
// record files the pipelines emit.
type redisEnv struct {
	t   *testing.T
	srv *redistest.Server
	rdb *redis.Client
	dir string
}

func newRedisEnv(t *testing.T) *redisEnv {
	t.Helper()
	srv := redistest.Start(t)
	return &redisEnv{t: t, srv: srv, rdb: srv.Client(t), dir: t.TempDir()}
}

// config writes flow.hcl: a redis block on the test's server, then body.
func (e *redisEnv) config(body string) string {
	e.t.Helper()
	return writeFile(e.t, e.dir, "flow.hcl", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n\n%s", e.srv.URL, body))
}

// lpush preloads a list the way a producer does: each element LPUSHed in order, so the first
// one is read first.
func (e *redisEnv) lpush(key string, elems ...string) {
	e.t.Helper()
	if len(elems) == 0 {
		return
	}
	vals := make([]any, len(elems))
	for i, el := range elems {
		vals[i] = el
	}
	if err := e.rdb.LPush(context.Background(), key, vals...).Err(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *redisEnv) lrange(key string) []string {
	e.t.Helper()
	v, err := e.rdb.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		e.t.Fatalf("lrange %s: %v", key, err)
	}
	return v
}

func (e *redisEnv) llen(key string) int64 {
	e.t.Helper()
	n, err := e.rdb.LLen(context.Background(), key).Result()
	if err != nil {
		e.t.Fatalf("llen %s: %v", key, err)
	}
	return n
}

// llens reads the lengths of a and b at one instant (one MULTI), so an element moving between
// them while flowrun reads is never counted twice or not at all.
func (e *redisEnv) llens(a, b string) (int64, int64) {
	e.t.Helper()
	var ca, cb *redis.IntCmd
	_, err := e.rdb.TxPipelined(context.Background(), func(p redis.Pipeliner) error {
		ca, cb = p.LLen(context.Background(), a), p.LLen(context.Background(), b)
		return nil
	})
	if err != nil {
		e.t.Fatalf("llen %s %s: %v", a, b, err)
	}
	return ca.Val(), cb.Val()
}

// keys returns every key in the server, sorted.
func (e *redisEnv) keys() []string {
	e.t.Helper()
	ks, err := e.rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	slices.Sort(ks)
	return ks
}

// lines returns the complete lines of a record file under the env's folder (none while it
// does not exist).
func (e *redisEnv) lines(name string) []string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, name))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	s := string(b)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	} else {
		return nil // not even one complete line yet
	}
	return strings.Split(s, "\n")
}

// stop sends SIGTERM and requires a clean exit.
func stop(t *testing.T, p *proc) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; stderr:\n%s", code, p.err.String())
	}
}

// envelope is a list element or Pub/Sub message flowrun wrote (SPEC §3).
type envelope struct {
	Headers map[string]string `json:"headers"`
	Payload json.RawMessage   `json:"payload"`
}

// checkDeadLetterHeaders asserts the headers of a dead letter: exactly want, plus an
// x-dead-letter-reason naming the cap and an x-failed-at within [since, now].
func checkDeadLetterHeaders(t *testing.T, got, want map[string]string, since time.Time) {
	t.Helper()
	rest := maps.Clone(got)
	delete(rest, "x-dead-letter-reason")
	delete(rest, "x-failed-at")
	if !maps.Equal(rest, want) {
		t.Errorf("dead-letter headers %v, want %v plus x-dead-letter-reason and x-failed-at", got, want)
	}
	if reason := got["x-dead-letter-reason"]; !strings.Contains(reason, "max_attempts") {
		t.Errorf("x-dead-letter-reason %q does not name max_attempts", reason)
	}
	at, err := time.Parse(time.RFC3339, got["x-failed-at"])
	if err != nil {
		t.Fatalf("x-failed-at %q is not RFC 3339: %v", got["x-failed-at"], err)
	}
	if at.Before(since.Truncate(time.Second)) || at.After(time.Now()) {
		t.Errorf("x-failed-at %v is not between %v and now", at, since)
	}
}

// seenEmit is a rule body fragment that records each delivery its rule decides: its key, attempt,
// headers and raw payload, in one record line of seen.jsonl.
const seenEmit = `    emit "record" {
      key     = "seen"
      path    = "seen.jsonl"
      payload = "{'key': key, 'attempt': attempt, 'headers': headers, 'raw': raw}"
    }
`

// seen is the record line seenEmit writes.
func seen(key string, attempt int, headers, raw string) string {
	rawJSON, _ := json.Marshal(raw)
	return fmt.Sprintf(`{"key":"seen","payload":{"attempt":%d,"headers":%s,"key":%q,"raw":%s}}`, attempt, headers, key, rawJSON)
}

func listPipeline(reliable bool, extra, rules string) string {
	return fmt.Sprintf(`pipeline "jobs" {
  source "list" {
    key      = "jobs"
    reliable = %t
    consumer = "w1"
    block    = "100ms"
  }
  concurrency = 1
%s
%s}
`, reliable, extra, rules)
}

const processing = "jobs:processing:w1"

// TestListSettlement runs each settlement row of SPEC §4 for reliable and simple lists, and
// checks the list, the processing list, the dead-letter list and what the rules saw.
func TestListSettlement(t *testing.T) {
	t.Parallel()
	retryOnce := `  rule "first" {
    when    = "attempt == 1"
` + seenEmit + `    outcome = "retry"
  }
  rule "then" {
` + seenEmit + `    outcome = "ack"
  }
`
	always := func(outcome string) string {
		return `  rule "all" {
` + seenEmit + `    outcome = "` + outcome + `"
  }
`
	}
	dlqWant := func(attempts, retryCount string) map[string]string {
		return map[string]string{"x-original-key": "jobs", "x-attempts": attempts, "x-retry-count": retryCount}
	}
	cases := []struct {
		name     string
		reliable bool
		extra    string // pipeline attributes
		rules    string
		elems    []string
		// wait: how many records, and a log text, show that everything is settled.
		records int
		log     string
		want    []string          // seen.jsonl
		dlq     map[string]string // the one dead letter's headers (nil: no dead-letter list)
	}{
		{
			name: "reliable ack", reliable: true, rules: always("ack"),
			elems: []string{`{"a":1}`, "hello"}, records: 2,
			want: []string{seen("jobs", 1, "{}", `{"a":1}`), seen("jobs", 1, "{}", "hello")},
		},
		{
			name: "reliable drop", reliable: true, rules: always("drop"),
			elems: []string{"bye"}, records: 1,
			want: []string{seen("jobs", 1, "{}", "bye")},
		},
		{
			name: "reliable retry copies with x-retry-count", reliable: true, rules: retryOnce,
			elems: []string{"hello"}, records: 2,
			want: []string{seen("jobs", 1, "{}", "hello"), seen("jobs", 2, `{"x-retry-count":"1"}`, "hello")},
		},
		{
			name: "reliable retry capped into the dead-letter list", reliable: true,
			extra: "  max_attempts = 2\n  dead_letter  = \"jobs.dlq\"\n", rules: always("retry"),
			elems: []string{"hello"}, records: 2, log: "dead-lettered",
			want: []string{seen("jobs", 1, "{}", "hello"), seen("jobs", 2, `{"x-retry-count":"1"}`, "hello")},
			dlq:  dlqWant("2", "1"),
		},
		{
			name: "reliable rejected without a dead letter", reliable: true,
			extra: "  max_attempts = 2\n", rules: always("retry"),
			elems: []string{"hello"}, records: 2, log: "rejected",
			want: []string{seen("jobs", 1, "{}", "hello"), seen("jobs", 2, `{"x-retry-count":"1"}`, "hello")},
		},
		{
			name: "simple ack", rules: always("ack"),
			elems: []string{`{"a":1}`, "hello"}, records: 2,
			want: []string{seen("jobs", 1, "{}", `{"a":1}`), seen("jobs", 1, "{}", "hello")},
		},
		{
			name: "simple retry without a cap is unsupported", rules: always("retry"),
			elems: []string{"hello"}, records: 1, log: "retry unsupported",
			want: []string{seen("jobs", 1, "{}", "hello")},
		},
		{
			name: "simple retry under max_attempts copies", extra: "  max_attempts = 3\n", rules: always("retry"),
			elems: []string{"hello"}, records: 3, log: "rejected",
			want: []string{
				seen("jobs", 1, "{}", "hello"),
				seen("jobs", 2, `{"x-retry-count":"1"}`, "hello"),
				seen("jobs", 3, `{"x-retry-count":"2"}`, "hello"),
			},
		},
		{
			name: "simple retry capped into the dead-letter list", extra: "  max_attempts = 2\n  dead_letter  = \"jobs.dlq\"\n",
			rules: always("retry"), elems: []string{"hello"}, records: 2, log: "dead-lettered",
			want: []string{seen("jobs", 1, "{}", "hello"), seen("jobs", 2, `{"x-retry-count":"1"}`, "hello")},
			dlq:  dlqWant("2", "1"),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newRedisEnv(t)
			cfg := e.config(listPipeline(c.reliable, c.extra, c.rules))
			e.lpush("jobs", c.elems...)
			since := time.Now()
			p := start(t, "run", cfg)
			eventually(t, 5*time.Second, "every delivery settled", func() bool {
				return len(e.lines("seen.jsonl")) >= c.records && e.llen("jobs") == 0 && e.llen(processing) == 0 &&
					strings.Contains(p.err.String(), c.log)
			})
			stop(t, p)

			if got := e.lines("seen.jsonl"); !slices.Equal(got, c.want) {
				t.Errorf("seen.jsonl:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if got := e.lrange("jobs"); len(got) != 0 {
				t.Errorf("list jobs %q, want empty", got)
			}
			wantKeys := []string(nil)
			if c.dlq != nil {
				wantKeys = []string{"jobs.dlq"}
			}
			// No processing list is left behind (a simple list never makes one), no copy either.
			if got := e.keys(); !slices.Equal(got, wantKeys) {
				t.Errorf("keys %q, want %q", got, wantKeys)
			}
			if c.dlq == nil {
				return
			}
			dl := e.lrange("jobs.dlq")
			if len(dl) != 1 {
				t.Fatalf("dead-letter list %q, want one element", dl)
			}
			var env envelope
			if err := json.Unmarshal([]byte(dl[0]), &env); err != nil {
				t.Fatalf("dead letter %q is not an envelope: %v", dl[0], err)
			}
			if string(env.Payload) != `"hello"` {
				t.Errorf("dead-letter payload %s, want \"hello\"", env.Payload)
			}
			checkDeadLetterHeaders(t, env.Headers, c.dlq, since)
		})
	}
}

// TestListEnvelopes: a bare element is a payload with no headers and is removed from the
// processing list byte for byte as read; an envelope's headers are visible to rules.
func TestListEnvelopes(t *testing.T) {
	t.Parallel()
	e := newRedisEnv(t)
	cfg := e.config(listPipeline(true, "", `  rule "tagged" {
    when = "headers['k'] == 'v'"
    emit "record" {
      key     = "tagged"
      path    = "seen.jsonl"
      payload = "{'headers': headers, 'raw': raw, 'x': payload.x}"
    }
    outcome = "ack"
  }
  rule "other" {
`+seenEmit+`    outcome = "ack"
  }
`))
	elems := []string{
		"hello",
		`{"a": 1 }`,                  // JSON but no envelope; spacing that a re-encoding would lose
		`{"payload": 1, "extra": 2}`, // an unknown key: a bare payload
		` {"headers": {"k": "v"},  "payload": {"x": 1}}`,
		`{"payload":"p"}`, // an envelope without headers
		`{"headers":{"j":"w"},"payload":"q"}`,
	}
	e.lpush("jobs", elems...)
	want := []string{
		seen("jobs", 1, "{}", "hello"),
		seen("jobs", 1, "{}", `{"a": 1 }`),
		seen("jobs", 1, "{}", `{"payload": 1, "extra": 2}`),
		`{"key":"tagged","payload":{"headers":{"k":"v"},"raw":"{\"x\":1}","x":1}}`,
		seen("jobs", 1, "{}", "p"),
		seen("jobs", 1, `{"j":"w"}`, "q"),
	}
	p := start(t, "run", cfg)
	eventually(t, 5*time.Second, "every element handled", func() bool {
		return len(e.lines("seen.jsonl")) >= len(want)
	})
	eventually(t, 5*time.Second, "the processing list to empty", func() bool { return e.llen(processing) == 0 })
	stop(t, p)
	if got := e.lines("seen.jsonl"); !slices.Equal(got, want) {
		t.Errorf("seen.jsonl:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A stop returns to the list whatever is left in the processing list, so an element whose
	// LREM missed would show up in one of the two.
	if got := e.keys(); len(got) != 0 {
		t.Errorf("keys %q left (list %q, processing %q), want none", got, e.lrange("jobs"), e.lrange(processing))
	}
}

// TestListRetryAfter: the runtime copy comes back after the delay, not before; one still held
// at a stop is written back at once, as an envelope with x-retry-count.
func TestListRetryAfter(t *testing.T) {
	t.Parallel()
	const delay = 700 * time.Millisecond
	for _, reliable := range []bool{true, false} {
		t.Run(fmt.Sprintf("reliable=%t", reliable), func(t *testing.T) {
			t.Parallel()
			e := newRedisEnv(t)
			cfg := e.config(listPipeline(reliable, "", `  rule "first" {
    when    = "attempt == 1"
`+seenEmit+`    outcome = "retry_after('700ms')"
  }
  rule "then" {
`+seenEmit+`    outcome = "ack"
  }
`))
			e.lpush("jobs", "hello")
			started := time.Now()
			p := start(t, "run", cfg)
			// The file's modification times date the two attempts' emits, however late this
			// test gets to look.
			seenFile := filepath.Join(e.dir, "seen.jsonl")
			var first, second time.Time
			eventually(t, 5*time.Second, "the first attempt", func() bool {
				st, err := os.Stat(seenFile)
				if err != nil {
					return false
				}
				switch n := len(e.lines("seen.jsonl")); {
				case n == 1:
					first = st.ModTime()
					return true
				case n > 1:
					t.Fatal("the copy came back before the first attempt was seen")
				}
				return false
			})
			eventually(t, 5*time.Second, "the second attempt", func() bool { return len(e.lines("seen.jsonl")) >= 2 })
			if time.Since(started) < delay {
				t.Errorf("the copy came back %v after the start, before the delay %v", time.Since(started), delay)
			}
			st, err := os.Stat(seenFile)
			if err != nil {
				t.Fatal(err)
			}
			second = st.ModTime()
			// File times have the kernel's tick granularity.
			if gap := second.Sub(first); gap < delay-10*time.Millisecond || gap > delay+500*time.Millisecond {
				t.Errorf("the copy came back after %v, want %v", gap, delay)
			}
			eventually(t, 5*time.Second, "the copy settled", func() bool { return e.llen(processing) == 0 })
			stop(t, p)
			want := []string{seen("jobs", 1, "{}", "hello"), seen("jobs", 2, `{"x-retry-count":"1"}`, "hello")}
			if got := e.lines("seen.jsonl"); !slices.Equal(got, want) {
				t.Errorf("seen.jsonl:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if got := e.keys(); len(got) != 0 {
				t.Errorf("keys %q left, want none", got)
			}
		})
		t.Run(fmt.Sprintf("reliable=%t held at stop", reliable), func(t *testing.T) {
			t.Parallel()
			e := newRedisEnv(t)
			cfg := e.config(listPipeline(reliable, "", `  rule "all" {
`+seenEmit+`    outcome = "retry_after('1h')"
  }
`))
			e.lpush("jobs", "hello", `{"headers":{"k":"v"},"payload":{"a":1}}`)
			p := start(t, "run", cfg)
			eventually(t, 5*time.Second, "both handled", func() bool {
				return len(e.lines("seen.jsonl")) >= 2 && e.llen(processing) == 0 && e.llen("jobs") == 0
			})
			stop(t, p)
			got := e.lrange("jobs")
			slices.Sort(got) // two copies released at once: their order is not the point
			want := []string{
				`{"headers":{"k":"v","x-retry-count":"1"},"payload":{"a":1}}`,
				`{"headers":{"x-retry-count":"1"},"payload":"hello"}`,
			}
			if !slices.Equal(got, want) {
				t.Errorf("list jobs after the stop %q, want the held copies %q", got, want)
			}
			if n := e.llen(processing); n != 0 {
				t.Errorf("processing list has %d elements, want 0", n)
			}
		})
	}
}

// TestReliableListSurvivesKill9: a kill -9 mid-backlog, then a restart with the same consumer
// name, handles every element at least once and leaves both lists empty.
func TestReliableListSurvivesKill9(t *testing.T) {
	t.Parallel()
	const n = 50000 // enough that the kill lands mid-backlog at full speed
	e := newRedisEnv(t)
	// No consumer in the file: --consumer names it, so both runs share one processing list.
	cfg := e.config(`pipeline "jobs" {
  source "list" {
    key   = "jobs"
    block = "100ms"
  }
  concurrency = 4
  rule "all" {
    emit "record" {
      key  = "seen"
      path = "seen.jsonl"
    }
    outcome = "ack"
  }
}
`)
	elems := make([]any, n)
	for i := range elems {
		elems[i] = fmt.Sprintf(`{"n":%d}`, i)
	}
	if err := e.rdb.LPush(context.Background(), "jobs", elems...).Err(); err != nil {
		t.Fatal(err)
	}

	// A kill can land between two batches, when every moved element is already removed; then
	// the processing list is empty and there is nothing to recover, so run and kill again.
	var left, stranded int64
	for try := 1; ; try++ {
		before := len(e.lines("seen.jsonl"))
		p := start(t, "run", "--consumer", "w1", cfg)
		eventually(t, 10*time.Second, "some elements handled", func() bool { return len(e.lines("seen.jsonl")) >= before+300 })
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(5 * time.Second); code != -int(syscall.SIGKILL) {
			t.Fatalf("exit %d, want killed", code)
		}
		left, stranded = e.llen("jobs"), e.llen(processing)
		t.Logf("kill %d after %d records: %d in the list, %d in the processing list", try, len(e.lines("seen.jsonl")), left, stranded)
		if left == 0 {
			t.Fatal("the backlog was done before the kill; raise n")
		}
		if stranded > 0 {
			break
		}
		if try == 5 {
			t.Fatal("nothing was in the processing list at any of 5 kills; the restart has nothing to recover")
		}
	}

	p := start(t, "run", "--consumer", "w1", cfg)
	eventually(t, 20*time.Second, "the backlog done", func() bool {
		return e.llen("jobs") == 0 && e.llen(processing) == 0
	})
	stop(t, p)
	if !strings.Contains(p.err.String(), "returned elements left in the processing list") {
		t.Errorf("the restart did not log the recovery of the processing list:\n%s", p.err.String())
	}

	handled := map[int]int{}
	for _, line := range e.lines("seen.jsonl") {
		var r struct {
			Key     string `json:"key"`
			Payload struct {
				N *int `json:"n"`
			} `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Key != "seen" || r.Payload.N == nil {
			t.Fatalf("bad record %q: %v", line, err)
		}
		handled[*r.Payload.N]++
	}
	for i := range n {
		if handled[i] == 0 {
			t.Errorf("element %d never handled", i)
		}
	}
	if len(handled) != n {
		t.Errorf("%d distinct elements handled, want %d", len(handled), n)
	}
	if got := e.keys(); len(got) != 0 {
		t.Errorf("keys %q left, want none", got)
	}
}

// TestReliableListBackpressure: while every handler is busy the source stops reading, so no
// more than concurrency + batch elements are out of the list; at a stop past shutdown_timeout
// the handlers' deliveries go back as retry copies and nothing else is lost or left behind.
func TestReliableListBackpressure(t *testing.T) {
	t.Parallel()
	const (
		n           = 100
		concurrency = 2
		batch       = 3
	)
	e := newRedisEnv(t)
	cfg := e.config(fmt.Sprintf(`pipeline "jobs" {
  source "list" {
    key      = "jobs"
    consumer = "w1"
    batch    = %d
    block    = "100ms"
  }
  concurrency      = %d
  shutdown_timeout = "200ms"
  handler "exec" {
    command = ["sleep", "30"]
  }
}
`, batch, concurrency))
	var want []string // the list's contents, left to right, as a producer LPUSHed them
	for i := 1; i <= n; i++ {
		e.lpush("jobs", fmt.Sprint(i))
		want = append([]string{fmt.Sprint(i)}, want...)
	}
	p := start(t, "run", cfg)
	eventually(t, 5*time.Second, "every handler busy", func() bool { return e.llen(processing) >= concurrency })
	// Watch a while: reading has stopped, within the bound, and nothing went missing.
	for range 30 {
		out, left := e.llens(processing, "jobs")
		if out > concurrency+batch {
			t.Fatalf("%d elements out of the list, want at most %d", out, concurrency+batch)
		}
		if out+left != n {
			t.Fatalf("%d in the list and %d in the processing list, want %d in all", left, out, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop(t, p)

	got := e.lrange("jobs")
	var originals, copies []string
	for _, el := range got {
		if strings.HasPrefix(el, "{") {
			copies = append(copies, el)
		} else {
			originals = append(originals, el)
		}
	}
	slices.Sort(copies)
	wantCopies := []string{
		`{"headers":{"x-retry-count":"1"},"payload":1}`,
		`{"headers":{"x-retry-count":"1"},"payload":2}`,
	}
	if !slices.Equal(copies, wantCopies) {
		t.Errorf("copies %q, want %q", copies, wantCopies)
	}
	if !slices.Equal(originals, want[:n-2]) {
		t.Errorf("list after the stop %q, want 100…3 in order and the two copies", got)
	}
	if out := e.llen(processing); out != 0 {
		t.Errorf("processing list has %d elements, want 0", out)
	}
}
