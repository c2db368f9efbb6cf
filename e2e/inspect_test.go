package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// flowrun inspect and flowrun dlq list|redrive (SPEC §1) through the built binary. Most tests
// build the Redis state directly with go-redis (a stream with a group and pending entries, a
// durable delay queue, dead-letter streams and lists with x- headers), run the command and
// assert what it printed and, for redrive, the exact keys afterwards.

// inspEnv is one test's redis-server, a client on it and a folder for the config.
type inspEnv struct {
	t   *testing.T
	srv *redistest.Server
	rdb *redis.Client
	dir string
	ctx context.Context
}

func newInspEnv(t *testing.T) *inspEnv {
	t.Helper()
	srv := redistest.Start(t)
	return &inspEnv{t: t, srv: srv, rdb: srv.Client(t), dir: t.TempDir(), ctx: context.Background()}
}

// inspConfig writes flow.hcl: a redis block on url, then body.
func inspConfig(t *testing.T, dir, url, body string) string {
	t.Helper()
	return writeFile(t, dir, "flow.hcl", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n\n%s", url, body))
}

func (e *inspEnv) config(body string) string {
	e.t.Helper()
	return inspConfig(e.t, e.dir, e.srv.URL, body)
}

// must fails the test on a Redis error.
func (e *inspEnv) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *inspEnv) xadd(key, id string, fields ...string) string {
	e.t.Helper()
	if id == "" {
		id = "*"
	}
	got, err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: key, ID: id, Values: fields}).Result()
	e.must(err)
	return got
}

func (e *inspEnv) lpush(key string, elems ...string) {
	e.t.Helper()
	for _, el := range elems {
		e.must(e.rdb.LPush(e.ctx, key, el).Err())
	}
}

// xrange returns a stream's entries as field maps, in order.
func (e *inspEnv) xrange(key string) []map[string]string {
	e.t.Helper()
	xs, err := e.rdb.XRange(e.ctx, key, "-", "+").Result()
	e.must(err)
	out := make([]map[string]string, len(xs))
	for i, x := range xs {
		out[i] = map[string]string{}
		for k, v := range x.Values {
			out[i][k] = fmt.Sprint(v)
		}
	}
	return out
}

func (e *inspEnv) xids(key string) []string {
	e.t.Helper()
	xs, err := e.rdb.XRange(e.ctx, key, "-", "+").Result()
	e.must(err)
	ids := make([]string, len(xs))
	for i, x := range xs {
		ids[i] = x.ID
	}
	return ids
}

func (e *inspEnv) lrange(key string) []string {
	e.t.Helper()
	v, err := e.rdb.LRange(e.ctx, key, 0, -1).Result()
	e.must(err)
	return v
}

// inspRun runs flowrun and fails unless it exits with want.
func inspRun(t *testing.T, want int, args ...string) result {
	t.Helper()
	r := flowrun(t, "", args...)
	if r.code != want {
		t.Fatalf("flowrun %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, r.code, want, r.stdout, r.stderr)
	}
	return r
}

// inspTable splits a tabwriter table into rows of cells: cells are separated by two or more
// spaces (the tables pad with at least two), so single spaces inside a cell survive.
func inspTable(t *testing.T, out string) [][]string {
	t.Helper()
	sep := regexp.MustCompile(` {2,}`)
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, sep.Split(strings.TrimRight(line, " "), -1))
	}
	return rows
}

// dlqFields are the headers a dead letter carries (SPEC §5), plus the counts a redrive resets.
func dlqFields(reason, origKey, origID, attempts string) []string {
	f := []string{
		"x-dead-letter-reason", reason,
		"x-original-key", origKey,
		"x-attempts", attempts,
		"x-failed-at", "2030-01-01T00:00:00Z",
		"x-retry-count", "2",
	}
	if origID != "" {
		f = append(f, "x-original-id", origID)
	}
	return f
}

const inspDue = 1893456000000 // 2030-01-01T00:00:00Z in ms

// TestInspectShowsEveryPipeline: one row per pipeline with exact numbers for a stream with a
// group (length, lag, pending, oldest pending idle), a durable delay queue, a reliable list's
// processing list, dead-letter streams and lists; missing keys read as 0 and what does not apply
// as "-". --json carries the same numbers.
func TestInspectShowsEveryPipeline(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(`
pipeline "pay" {
  source "stream" {
    stream = "insp.pay"
  }
  dead_letter   = "insp.pay.dlq"
  delayed_retry = "durable_zset"
  rule "all" { outcome = "ack" }
}
pipeline "jobs" {
  source "list" {
    key      = "insp.jobs"
    consumer = "w1"
  }
  dead_letter = "insp.jobs.dlq"
  rule "all" { outcome = "ack" }
}
pipeline "simple" {
  source "list" {
    key      = "insp.simple"
    reliable = false
  }
  rule "all" { outcome = "ack" }
}
pipeline "events" {
  source "pubsub" {
    channels = ["insp.a", "insp.b"]
  }
  dead_letter = "insp.events.dlq"
  rule "all" { outcome = "ack" }
}
pipeline "idle" {
  source "claiming" {
    stream   = "insp.none"
    min_idle = "30s"
  }
  dead_letter = "insp.none.dlq"
  rule "all" { outcome = "ack" }
}
pipeline "replay" {
  source "file" {
    path = "in.jsonl"
  }
  rule "all" { outcome = "ack" }
}
`)
	writeFile(t, e.dir, "in.jsonl", `{"key":"k","payload":1}`+"\n")

	// insp.pay: 5 entries, 3 delivered to the group "pay" (lag 2), the lowest of them idle 1h.
	var ids []string
	for i := range 5 {
		ids = append(ids, e.xadd("insp.pay", "", "payload", fmt.Sprint(i)))
	}
	e.must(e.rdb.XGroupCreate(e.ctx, "insp.pay", "pay", "0").Err())
	e.must(e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "pay", Consumer: "c1", Streams: []string{"insp.pay", ">"}, Count: 3}).Err())
	e.must(e.rdb.Do(e.ctx, "XCLAIM", "insp.pay", "pay", "c1", 0, ids[0], "IDLE", time.Hour.Milliseconds()).Err())
	e.must(e.rdb.ZAdd(e.ctx, "insp.pay:delayed", redis.Z{Score: inspDue + 5000, Member: "later"}, redis.Z{Score: inspDue, Member: "first"}).Err())
	e.xadd("insp.pay.dlq", "", append(dlqFields("boom", "insp.pay", ids[0], "3"), "payload", "x")...)
	e.xadd("insp.pay.dlq", "", append(dlqFields("boom", "insp.pay", ids[1], "3"), "payload", "y")...)
	// insp.jobs: 4 waiting, 2 in w1's processing list, 3 dead letters.
	e.lpush("insp.jobs", "a", "b", "c", "d")
	e.lpush("insp.jobs:processing:w1", "e", "f")
	e.lpush("insp.jobs.dlq", `{"payload":1}`, `{"payload":2}`, `{"payload":3}`)
	e.lpush("insp.simple", "s")
	e.xadd("insp.events.dlq", "", "x-original-key", "insp.a", "payload", "p")

	r := inspRun(t, 0, "inspect", cfg)
	rows := inspTable(t, r.stdout)
	want := [][]string{
		{"PIPELINE", "SOURCE", "KEY", "LENGTH", "LAG", "PENDING", "OLDEST-IDLE", "DELAYED", "NEXT-DUE", "DEAD-LETTERS"},
		{"pay", "stream", "insp.pay", "5", "2", "3", "IDLE", "2", "2030-01-01T00:00:00Z", "2"},
		{"jobs", "list", "insp.jobs", "4", "-", "2", "-", "-", "-", "3"},
		{"simple", "list", "insp.simple", "1", "-", "-", "-", "-", "-", "-"},
		{"events", "pubsub", "insp.a,insp.b", "-", "-", "-", "-", "-", "-", "1"},
		{"idle", "claiming", "insp.none", "0", "-", "0", "-", "-", "-", "0"},
		{"replay", "file", "PATH", "-", "-", "-", "-", "-", "-", "-"},
	}
	if len(rows) != len(want) {
		t.Fatalf("inspect printed %d lines, want %d:\n%s", len(rows), len(want), r.stdout)
	}
	for i := range want {
		got := slices.Clone(rows[i])
		if i == 1 && len(got) > 6 {
			// The idle time grows while the test runs: about an hour, in whole seconds.
			d, err := time.ParseDuration(got[6])
			if err != nil || d < time.Hour || d > time.Hour+time.Minute || d%time.Second != 0 {
				t.Errorf("pay OLDEST-IDLE = %q, want 1h0m0s or a few seconds more", got[6])
			}
			got[6] = "IDLE"
		}
		if i == 6 && len(got) > 2 && strings.HasSuffix(got[2], "in.jsonl") {
			got[2] = "PATH"
		}
		if !slices.Equal(got, want[i]) {
			t.Errorf("row %d = %q, want %q", i, rows[i], want[i])
		}
	}

	r = inspRun(t, 0, "inspect", "--json", "--pipeline", "pay", "--pipeline", "jobs", cfg)
	var js []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
	}
	if len(js) != 2 {
		t.Fatalf("inspect --json printed %d pipelines, want 2:\n%s", len(js), r.stdout)
	}
	idle, _ := js[0]["oldest_pending_idle_ms"].(float64)
	if idle < float64(time.Hour.Milliseconds()) {
		t.Errorf("oldest_pending_idle_ms = %v, want at least an hour", js[0]["oldest_pending_idle_ms"])
	}
	delete(js[0], "oldest_pending_idle_ms")
	wantJSON := []map[string]any{
		{"pipeline": "pay", "source": "stream", "key": "insp.pay", "group": "pay", "length": 5.0, "lag": 2.0, "pending": 3.0,
			"delay_key": "insp.pay:delayed", "delayed": 2.0, "next_due": "2030-01-01T00:00:00Z", "dead_letter": "insp.pay.dlq", "dead_letters": 2.0},
		{"pipeline": "jobs", "source": "list", "key": "insp.jobs", "length": 4.0, "lag": nil, "pending": 2.0, "oldest_pending_idle_ms": nil,
			"processing": "insp.jobs:processing:w1", "delayed": nil, "next_due": nil, "dead_letter": "insp.jobs.dlq", "dead_letters": 3.0},
	}
	for i := range wantJSON {
		if !maps.EqualFunc(js[i], wantJSON[i], func(a, b any) bool { return a == b }) {
			t.Errorf("inspect --json [%d] = %v, want %v", i, js[i], wantJSON[i])
		}
	}
}

// TestInspectDLQList: dlq list shows the oldest dead letters first, at most --limit (default
// 10), with their dead-letter headers and a payload cut to 80 characters, for a stream and for a
// list of envelopes.
func TestInspectDLQList(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(`
pipeline "pay" {
  source "stream" {
    stream = "insp.pay"
  }
  dead_letter = "insp.pay.dlq"
  rule "all" { outcome = "ack" }
}
pipeline "jobs" {
  source "list" {
    key = "insp.jobs"
  }
  dead_letter = "insp.jobs.dlq"
  rule "all" { outcome = "ack" }
}
pipeline "empty" {
  source "stream" {
    stream = "insp.empty"
  }
  dead_letter = "insp.empty.dlq"
  rule "all" { outcome = "ack" }
}
`)
	long := strings.Repeat("x", 100)
	e.xadd("insp.pay.dlq", "1-1", append(dlqFields("max_attempts (3) reached", "insp.pay", "7-0", "3"), "payload", `{"id":1}`)...)
	e.xadd("insp.pay.dlq", "2-1", append(dlqFields("http 400", "insp.pay", "8-0", "1"), "payload", long)...)
	e.xadd("insp.pay.dlq", "3-1", append(dlqFields("exit 1: line\nbreak", "insp.pay", "9-0", "2"), "payload", "a\tb")...)
	e.lpush("insp.jobs.dlq",
		`{"headers":{"x-dead-letter-reason":"boom","x-original-key":"insp.jobs","x-attempts":"1","x-failed-at":"2030-01-01T00:00:00Z"},"payload":{"n":1}}`,
		`{"headers":{"x-dead-letter-reason":"bang","x-original-key":"insp.jobs","x-attempts":"2","x-failed-at":"2030-01-02T00:00:00Z"},"payload":"two"}`,
		"bare")

	header := []string{"ID", "FAILED-AT", "ATTEMPTS", "ORIGINAL-KEY", "ORIGINAL-ID", "REASON", "PAYLOAD"}
	tests := []struct {
		name string
		args []string
		rows [][]string
		tail string // the line after the table, if any
	}{
		{"stream, default limit", []string{"dlq", "list", "pay", cfg}, [][]string{
			header,
			{"1-1", "2030-01-01T00:00:00Z", "3", "insp.pay", "7-0", "max_attempts (3) reached", `{"id":1}`},
			{"2-1", "2030-01-01T00:00:00Z", "1", "insp.pay", "8-0", "http 400", strings.Repeat("x", 79) + "…"},
			{"3-1", "2030-01-01T00:00:00Z", "2", "insp.pay", "9-0", `exit 1: line\nbreak`, `a\tb`},
		}, ""},
		{"stream, flags after the paths", []string{"dlq", "list", "pay", cfg, "--limit", "1"}, [][]string{
			header,
			{"1-1", "2030-01-01T00:00:00Z", "3", "insp.pay", "7-0", "max_attempts (3) reached", `{"id":1}`},
		}, "1 of 3 dead letters in insp.pay.dlq shown (oldest first); --limit 0 shows all"},
		{"list of envelopes", []string{"dlq", "list", "--limit", "2", "jobs", cfg}, [][]string{
			header,
			{"-", "2030-01-01T00:00:00Z", "1", "insp.jobs", "-", "boom", `{"n":1}`},
			{"-", "2030-01-02T00:00:00Z", "2", "insp.jobs", "-", "bang", "two"},
		}, "2 of 3 dead letters in insp.jobs.dlq shown (oldest first); --limit 0 shows all"},
		{"list, all", []string{"dlq", "list", "--limit", "0", "jobs", cfg}, [][]string{
			header,
			{"-", "2030-01-01T00:00:00Z", "1", "insp.jobs", "-", "boom", `{"n":1}`},
			{"-", "2030-01-02T00:00:00Z", "2", "insp.jobs", "-", "bang", "two"},
			{"-", "-", "-", "-", "-", "-", "bare"},
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := inspRun(t, 0, tc.args...)
			out := r.stdout
			if tc.tail != "" {
				var ok bool
				if out, ok = strings.CutSuffix(out, tc.tail+"\n"); !ok {
					t.Fatalf("output does not end in %q:\n%s", tc.tail, r.stdout)
				}
			}
			rows := inspTable(t, out)
			if !slices.EqualFunc(rows, tc.rows, slices.Equal) {
				t.Errorf("dlq list printed\n%s\nrows %q\nwant %q", r.stdout, rows, tc.rows)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		r := inspRun(t, 0, "dlq", "list", "empty", cfg)
		if r.stdout != "no dead letters in insp.empty.dlq\n" {
			t.Errorf("stdout = %q", r.stdout)
		}
	})
}

// TestInspectRedriveStream: redrive moves the oldest dead letters back to the source stream as
// new entries with their own headers and payload, every x-dead-letter header and the retry and
// delivery counts removed, and deletes them from the dead-letter stream; --limit bounds it; a
// claiming source redrives the same way.
func TestInspectRedriveStream(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stream", "claiming"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newInspEnv(t)
			minIdle := ""
			if kind == "claiming" {
				minIdle = `min_idle = "30s"`
			}
			cfg := e.config(fmt.Sprintf(`
pipeline "pay" {
  source %q {
    stream = "insp.pay"
    %s
  }
  dead_letter = "insp.pay.dlq"
  rule "all" { outcome = "ack" }
}
`, kind, minIdle))
			e.xadd("insp.pay", "5-0", "payload", "already there")
			e.xadd("insp.pay.dlq", "1-1", append(dlqFields("boom", "insp.pay", "2-0", "3"),
				"x-delivery-count", "3", "x-idle-ms", "30000", "h", "v", "payload", "p1")...)
			e.xadd("insp.pay.dlq", "1-2", append(dlqFields("bang", "insp.pay", "3-0", "1"), "payload", `{"n":2}`)...)
			e.xadd("insp.pay.dlq", "1-3", "x-dead-letter-reason", "other producer", "id", "7", "amount", "12") // no payload field

			r := inspRun(t, 0, "dlq", "redrive", "pay", "--limit", "2", cfg)
			if r.stdout != "redrove 2 dead letters to insp.pay\n" {
				t.Errorf("stdout = %q", r.stdout)
			}
			want := []map[string]string{
				{"payload": "already there"},
				{"h": "v", "payload": "p1"},
				{"payload": `{"n":2}`},
			}
			if got := e.xrange("insp.pay"); !slices.EqualFunc(got, want, maps.Equal) {
				t.Errorf("insp.pay = %v, want %v", got, want)
			}
			if got := e.xids("insp.pay.dlq"); !slices.Equal(got, []string{"1-3"}) {
				t.Errorf("dead letters left = %v, want [1-3]", got)
			}

			r = inspRun(t, 0, "dlq", "redrive", "pay", cfg)
			if r.stdout != "redrove 1 dead letters to insp.pay\n" {
				t.Errorf("stdout = %q", r.stdout)
			}
			want = append(want, map[string]string{"id": "7", "amount": "12"})
			if got := e.xrange("insp.pay"); !slices.EqualFunc(got, want, maps.Equal) {
				t.Errorf("insp.pay = %v, want %v", got, want)
			}
			if n := e.rdb.XLen(e.ctx, "insp.pay.dlq").Val(); n != 0 {
				t.Errorf("dead letters left: %d", n)
			}

			r = inspRun(t, 0, "dlq", "redrive", "pay", cfg)
			if r.stdout != "redrove 0 dead letters to insp.pay\n" {
				t.Errorf("stdout of an empty redrive = %q", r.stdout)
			}
		})
	}
}

// TestInspectRedriveList: redrive LPUSHes each dead letter's envelope without the dead-letter
// headers and the retry count back to the list (a bare payload when no header is left), oldest
// first, and removes it from the dead-letter list.
func TestInspectRedriveList(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(`
pipeline "jobs" {
  source "list" {
    key = "insp.jobs"
  }
  dead_letter = "insp.jobs.dlq"
  rule "all" { outcome = "ack" }
}
`)
	e.lpush("insp.jobs", "old")
	e.lpush("insp.jobs.dlq",
		`{"headers":{"x-dead-letter-reason":"boom","x-original-key":"insp.jobs","x-attempts":"3","x-retry-count":"2","x-failed-at":"2030-01-01T00:00:00Z"},"payload":{"n":1}}`,
		`{"headers":{"keep":"k","x-dead-letter-reason":"bang","x-original-key":"insp.jobs","x-attempts":"1","x-failed-at":"2030-01-01T00:00:00Z"},"payload":"two"}`,
		`{"headers":{"x-dead-letter-reason":"boom","x-original-key":"insp.jobs","x-attempts":"3","x-retry-count":"2","x-failed-at":"2030-01-01T00:00:00Z"},"payload":{"n":1}}`,
	)
	third := e.lrange("insp.jobs.dlq")[0]

	r := inspRun(t, 0, "dlq", "redrive", "jobs", "--limit", "2", cfg)
	if r.stdout != "redrove 2 dead letters to insp.jobs\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	// A list source reads from the tail: "old" first, then the letters in their old order.
	want := []string{`{"headers":{"keep":"k"},"payload":"two"}`, `{"n":1}`, "old"}
	if got := e.lrange("insp.jobs"); !slices.Equal(got, want) {
		t.Errorf("insp.jobs = %q, want %q", got, want)
	}
	if got := e.lrange("insp.jobs.dlq"); !slices.Equal(got, []string{third}) {
		t.Errorf("dead letters left = %q, want the third only", got)
	}

	r = inspRun(t, 0, "dlq", "redrive", "jobs", cfg)
	if r.stdout != "redrove 1 dead letters to insp.jobs\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	want = append([]string{`{"n":1}`}, want...)
	if got := e.lrange("insp.jobs"); !slices.Equal(got, want) {
		t.Errorf("insp.jobs = %q, want %q", got, want)
	}
	if n := e.rdb.LLen(e.ctx, "insp.jobs.dlq").Val(); n != 0 {
		t.Errorf("dead letters left: %d", n)
	}
}

// TestInspectRedrivePubSub: a pubsub pipeline's dead letters (a stream) are published back to
// their x-original-key channel as envelopes without the dead-letter headers; with no subscriber
// on the channel nothing is deleted and the command fails, since the message would be lost.
func TestInspectRedrivePubSub(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(`
pipeline "events" {
  source "pubsub" {
    channels = ["insp.a", "insp.b"]
  }
  dead_letter = "insp.events.dlq"
  rule "all" { outcome = "ack" }
}
`)
	e.xadd("insp.events.dlq", "", append(dlqFields("boom", "insp.b", "", "3"), "keep", "k", "payload", "hi")...)
	e.xadd("insp.events.dlq", "", append(dlqFields("boom", "insp.a", "", "3"), "payload", `{"n":1}`)...)

	ps := e.rdb.Subscribe(e.ctx, "insp.a", "insp.b")
	defer ps.Close()
	for range 2 {
		if _, err := ps.ReceiveTimeout(e.ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	r := inspRun(t, 0, "dlq", "redrive", "events", cfg)
	if r.stdout != "redrove 2 dead letters to insp.a,insp.b\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	var got []string
	for range 2 {
		m, err := ps.ReceiveMessage(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Channel+" "+m.Payload)
	}
	want := []string{`insp.b {"headers":{"keep":"k"},"payload":"hi"}`, `insp.a {"n":1}`}
	if !slices.Equal(got, want) {
		t.Errorf("published %q, want %q", got, want)
	}
	if n := e.rdb.XLen(e.ctx, "insp.events.dlq").Val(); n != 0 {
		t.Errorf("dead letters left: %d", n)
	}

	ps.Close()
	eventually(t, 5*time.Second, "the test's subscription to end", func() bool {
		m, err := e.rdb.PubSubNumSub(e.ctx, "insp.a").Result()
		return err == nil && m["insp.a"] == 0
	})
	id := e.xadd("insp.events.dlq", "", append(dlqFields("boom", "insp.a", "", "3"), "payload", "lost?")...)
	r = inspRun(t, 2, "dlq", "redrive", "events", cfg)
	if !strings.Contains(r.stderr, "no subscriber on channel insp.a") {
		t.Errorf("stderr does not explain the refusal:\n%s", r.stderr)
	}
	if got := e.xids("insp.events.dlq"); !slices.Equal(got, []string{id}) {
		t.Errorf("dead letters = %v, want [%s] kept", got, id)
	}
}

// TestInspectRedriveCluster: in a Redis Cluster, a dead-letter key on another slot than the
// source is redriven copy first, then delete; one on the same slot (a hash tag) atomically. The
// results are the same as on a standalone server, and inspect reads the cluster too.
func TestInspectRedriveCluster(t *testing.T) {
	t.Parallel()
	srv := redistest.StartCluster(t)
	e := &inspEnv{t: t, srv: srv, rdb: srv.Client(t), dir: t.TempDir(), ctx: context.Background()}
	if redisconn.Slot("insp.pay") == redisconn.Slot("insp.pay.dlq") || redisconn.Slot("insp.jobs") == redisconn.Slot("insp.jobs.dlq") {
		t.Fatal("test keys share a slot; pick others")
	}
	cfg := writeFile(t, e.dir, "flow.hcl", fmt.Sprintf("redis \"main\" {\n  cluster = [%q]\n}\n", srv.Addr)+`
pipeline "pay" {
  source "stream" {
    stream = "insp.pay"
  }
  dead_letter = "insp.pay.dlq"
  rule "all" { outcome = "ack" }
}
pipeline "tagged" {
  source "stream" {
    stream = "{insp}.t"
  }
  dead_letter = "{insp}.t.dlq"
  rule "all" { outcome = "ack" }
}
pipeline "jobs" {
  source "list" {
    key = "{insp.jobs}"
  }
  dead_letter = "insp.jobs.dlq"
  rule "all" { outcome = "ack" }
}
`)
	for _, key := range []string{"insp.pay.dlq", "{insp}.t.dlq"} {
		e.xadd(key, "1-1", append(dlqFields("boom", "k", "2-0", "3"), "h", "v", "payload", "p1")...)
		e.xadd(key, "1-2", append(dlqFields("boom", "k", "3-0", "3"), "payload", "p2")...)
	}
	e.lpush("insp.jobs.dlq", `{"headers":{"x-dead-letter-reason":"boom","x-retry-count":"1"},"payload":"a"}`, `{"headers":{"x-attempts":"2","k":"v"},"payload":"b"}`)

	r := inspRun(t, 0, "inspect", cfg)
	rows := inspTable(t, r.stdout)
	wantRows := [][]string{
		{"PIPELINE", "SOURCE", "KEY", "LENGTH", "LAG", "PENDING", "OLDEST-IDLE", "DELAYED", "NEXT-DUE", "DEAD-LETTERS"},
		{"pay", "stream", "insp.pay", "0", "-", "0", "-", "-", "-", "2"},
		{"tagged", "stream", "{insp}.t", "0", "-", "0", "-", "-", "-", "2"},
		{"jobs", "list", "{insp.jobs}", "0", "-", "0", "-", "-", "-", "2"},
	}
	if !slices.EqualFunc(rows, wantRows, slices.Equal) {
		t.Errorf("inspect rows %q, want %q", rows, wantRows)
	}

	for _, tc := range []struct{ pipeline, stream, dlq string }{{"pay", "insp.pay", "insp.pay.dlq"}, {"tagged", "{insp}.t", "{insp}.t.dlq"}} {
		r := inspRun(t, 0, "dlq", "redrive", tc.pipeline, cfg)
		if want := "redrove 2 dead letters to " + tc.stream + "\n"; r.stdout != want {
			t.Errorf("stdout = %q, want %q", r.stdout, want)
		}
		want := []map[string]string{{"h": "v", "payload": "p1"}, {"payload": "p2"}}
		if got := e.xrange(tc.stream); !slices.EqualFunc(got, want, maps.Equal) {
			t.Errorf("%s = %v, want %v", tc.stream, got, want)
		}
		if n := e.rdb.XLen(e.ctx, tc.dlq).Val(); n != 0 {
			t.Errorf("%s: %d dead letters left", tc.dlq, n)
		}
	}
	r = inspRun(t, 0, "dlq", "redrive", "jobs", cfg)
	if r.stdout != "redrove 2 dead letters to {insp.jobs}\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	if got, want := e.lrange("{insp.jobs}"), []string{`{"headers":{"k":"v"},"payload":"b"}`, "a"}; !slices.Equal(got, want) {
		t.Errorf("{insp.jobs} = %q, want %q", got, want)
	}
	if n := e.rdb.LLen(e.ctx, "insp.jobs.dlq").Val(); n != 0 {
		t.Errorf("insp.jobs.dlq: %d dead letters left", n)
	}
}

// TestInspectRedriveResetsAttempts: a message that used up max_attempts is dead-lettered by a
// running pipeline, inspect counts it, redrive puts it back, and the next run handles it again
// from attempt 1.
func TestInspectRedriveResetsAttempts(t *testing.T) {
	t.Parallel()
	e := newInspEnv(t)
	cfg := e.config(`
pipeline "cycle" {
  source "stream" {
    stream   = "insp.cycle"
    consumer = "w1"
    block    = "100ms"
  }
  concurrency  = 1
  max_attempts = 2
  dead_letter  = "insp.cycle.dlq"
  rule "fail" {
    emit "stream" {
      key     = "insp.seen"
      payload = "{'attempt': attempt, 'raw': raw}"
    }
    outcome = "retry"
  }
}
`)
	e.xadd("insp.cycle", "", "h", "v", "payload", "hello")
	runUntilDead := func(n int64) {
		t.Helper()
		p := start(t, "run", cfg)
		eventually(t, 10*time.Second, "a dead letter", func() bool {
			return e.rdb.XLen(e.ctx, "insp.cycle.dlq").Val() == n
		})
		eventually(t, 10*time.Second, "nothing pending", func() bool {
			x, err := e.rdb.XPending(e.ctx, "insp.cycle", "cycle").Result()
			return err == nil && x.Count == 0
		})
		p.signal(syscall.SIGTERM)
		if code := p.wait(10 * time.Second); code != 0 {
			t.Fatalf("run exit %d; stderr:\n%s", code, p.err.String())
		}
	}
	runUntilDead(1)

	r := inspRun(t, 0, "inspect", cfg)
	rows := inspTable(t, r.stdout)
	// The original and its retry copy stay in the stream; both are acknowledged.
	wantRow := []string{"cycle", "stream", "insp.cycle", "2", "0", "0", "-", "-", "-", "1"}
	if len(rows) != 2 || !slices.Equal(rows[1], wantRow) {
		t.Fatalf("inspect rows %q, want %q", rows, wantRow)
	}
	dl := e.xrange("insp.cycle.dlq")[0]
	if dl["x-attempts"] != "2" || dl["x-retry-count"] != "1" {
		t.Fatalf("dead letter %v: want x-attempts 2 and x-retry-count 1", dl)
	}

	r = inspRun(t, 0, "dlq", "redrive", "cycle", cfg)
	if r.stdout != "redrove 1 dead letters to insp.cycle\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	entries := e.xrange("insp.cycle")
	if last := entries[len(entries)-1]; !maps.Equal(last, map[string]string{"h": "v", "payload": "hello"}) {
		t.Errorf("redriven entry = %v, want the original's fields only", last)
	}

	runUntilDead(1) // the redriven copy fails twice more and is dead-lettered again
	var attempts []int
	for _, s := range e.xrange("insp.seen") {
		var v struct {
			Attempt int    `json:"attempt"`
			Raw     string `json:"raw"`
		}
		if err := json.Unmarshal([]byte(s["payload"]), &v); err != nil || v.Raw != "hello" {
			t.Fatalf("seen %v: %v", s, err)
		}
		attempts = append(attempts, v.Attempt)
	}
	if !slices.Equal(attempts, []int{1, 2, 1, 2}) {
		t.Errorf("attempts seen = %v, want [1 2 1 2] (the redrive starts over at 1)", attempts)
	}
}

// TestInspectRedisUnreachable: with the server stopped, inspect and dlq exit 2 naming the redis
// block, quickly, and never print the password; a wrong password is exit 2 as well.
func TestInspectRedisUnreachable(t *testing.T) {
	t.Parallel()
	const pw = "insp-Secret-7q2"
	srv := redistest.Start(t, "--requirepass", pw)
	dir := t.TempDir()
	body := `
pipeline "pay" {
  source "stream" {
    stream = "insp.pay"
  }
  dead_letter = "insp.pay.dlq"
  rule "all" { outcome = "ack" }
}
`
	good := inspConfig(t, dir, "redis://:"+pw+"@"+srv.Addr+"/0", body)
	inspRun(t, 0, "inspect", good) // reachable with the right password

	wrongDir := t.TempDir()
	wrong := inspConfig(t, wrongDir, "redis://:"+pw+"-wrong@"+srv.Addr+"/0", body)
	r := inspRun(t, 2, "inspect", wrong)
	if !strings.Contains(r.stderr, `redis "main": authentication failed`) || strings.Contains(r.stderr, pw) {
		t.Errorf("wrong password: stderr = %q", r.stderr)
	}

	srv.Stop()
	for _, args := range [][]string{
		{"inspect", good},
		{"dlq", "list", "pay", good},
		{"dlq", "redrive", "pay", good},
	} {
		began := time.Now()
		r := inspRun(t, 2, args...)
		if took := time.Since(began); took > 15*time.Second {
			t.Errorf("%v took %v to give up", args[:2], took)
		}
		if !strings.Contains(r.stderr, `redis "main"`) {
			t.Errorf("%v: stderr does not name the redis block: %q", args[:2], r.stderr)
		}
		if strings.Contains(r.stderr+r.stdout, pw) {
			t.Errorf("%v: the password was printed: %q", args[:2], r.stderr)
		}
	}
}

// TestInspectDLQErrors: mistakes are exit 1 before any connection (the redis block points at a
// closed port, which would be exit 2).
func TestInspectDLQErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	body := `
pipeline "pay" {
  source "stream" {
    stream = "insp.pay"
  }
  dead_letter = "insp.pay.dlq"
  rule "all" { outcome = "ack" }
}
pipeline "nodlq" {
  source "stream" {
    stream = "insp.other"
  }
  rule "all" { outcome = "ack" }
}
pipeline "replay" {
  source "file" {
    path = "in.jsonl"
  }
  dead_letter = "dead"
  rule "all" { outcome = "ack" }
}
pipeline "stdin" {
  source "pipe" {}
  out_retry   = "again"
  dead_letter = "dead"
  rule "all" { outcome = "ack" }
}
`
	valid := inspConfig(t, dir, "redis://127.0.0.1:1/0", body)
	writeFile(t, dir, "in.jsonl", "")
	broken := inspConfig(t, t.TempDir(), "redis://127.0.0.1:1/0", body+"pattern \"x\" {}\n")
	bad := writeFile(t, t.TempDir(), "bad.hcl", "pipeline \"p\" {\n  source \"stream\" {}\n}\n")
	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"unknown pipeline", []string{"dlq", "list", "nope", valid}, `no pipeline "nope"`},
		{"unknown pipeline, redrive", []string{"dlq", "redrive", "nope", valid}, `no pipeline "nope"`},
		{"no dead_letter", []string{"dlq", "list", "nodlq", valid}, `pipeline "nodlq" has no dead_letter`},
		{"no dead_letter, redrive", []string{"dlq", "redrive", "nodlq", valid}, `pipeline "nodlq" has no dead_letter`},
		{"file source", []string{"dlq", "list", "replay", valid}, `pipeline "replay" has a file source`},
		{"pipe source", []string{"dlq", "redrive", "stdin", valid}, `pipeline "stdin" has a pipe source`},
		{"missing pipeline", []string{"dlq", "list"}, "missing PIPELINE"},
		{"unknown subcommand", []string{"dlq", "drop", "pay", valid}, "usage: flowrun dlq list|redrive|purge"},
		{"negative limit", []string{"dlq", "list", "pay", valid, "--limit", "-2"}, "--limit must be 0 or more"},
		{"inspect, config error", []string{"inspect", bad}, "bad.hcl:2:"},
		{"dlq, config error", []string{"dlq", "list", "pay", broken}, "flow.hcl:"},
		{"inspect, unknown pipeline", []string{"inspect", "--pipeline", "nope", valid}, `no pipeline "nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := inspRun(t, 1, tc.args...)
			if !strings.Contains(r.stderr, tc.stderr) {
				t.Errorf("stderr does not contain %q:\n%s", tc.stderr, r.stderr)
			}
		})
	}
}
