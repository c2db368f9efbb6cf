package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// The stream, claiming and reclaim sources through the built binary against real redis-server
// processes (issue 3): every settlement row of SPEC §4, the headers of §6, the cap and dead
// letters of §5, both delay modes, and kill -9 mid-backlog.
//
// Every pipeline reads the stream "jobs" with group "jobs" as consumer "w1", and its rules
// record each delivery they decide into the stream "seen" (streamSeenEmit), so the test sees
// what the handler saw: id, attempt, delivery_count, idle_ms and headers, and when it ran
// (`now()` in the rule), which times delays against Redis's ids without sleeping.

const (
	streamMinIdle  = 300 * time.Millisecond
	streamBlock    = 100 * time.Millisecond
	streamDeadline = 10 * time.Second
)

// streamEnv is one test's redis-server, a client on it and a folder for the config.
type streamEnv struct {
	t   *testing.T
	srv *redistest.Server
	rdb *redis.Client
	dir string
	ctx context.Context
}

func newStreamEnv(t *testing.T, args ...string) *streamEnv {
	t.Helper()
	srv := redistest.Start(t, args...)
	return &streamEnv{t: t, srv: srv, rdb: srv.Client(t), dir: t.TempDir(), ctx: context.Background()}
}

// streamConfig writes flow.hcl: a redis block on the test's server, then body.
func (e *streamEnv) streamConfig(body string) string {
	e.t.Helper()
	return writeFile(e.t, e.dir, "flow.hcl", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n\n%s", e.srv.URL, body))
}

// streamPipeline is the pipeline "jobs" reading the stream "jobs" as consumer "w1" with a
// source of kind, extra source attributes, extra pipeline attributes and rules. block (100ms)
// and concurrency (1) are defaults that source and extra may set instead.
func streamPipeline(kind, source, extra, rules string) string {
	src := "    stream   = \"jobs\"\n    consumer = \"w1\"\n"
	if !strings.Contains(source, "block") {
		src += fmt.Sprintf("    block    = %q\n", streamBlock)
	}
	if kind != "stream" {
		src += fmt.Sprintf("    min_idle = %q\n", streamMinIdle)
	}
	if !strings.Contains(extra, "concurrency") {
		extra = "  concurrency = 1\n" + extra
	}
	return fmt.Sprintf("pipeline \"jobs\" {\n  source %q {\n%s%s  }\n%s\n%s}\n", kind, src, source, extra, rules)
}

// streamSeenEmit records the delivery a rule decides into the stream "seen".
const streamSeenEmit = `    emit "stream" {
      key     = "seen"
      payload = "{'id': id, 'attempt': attempt, 'dc': delivery_count, 'idle': idle_ms, 'headers': headers, 'raw': raw, 'at': now().UnixMilli()}"
    }
`

// streamRule is a rule that records what it decides.
func streamRule(name, when, outcome string) string {
	w := ""
	if when != "" {
		w = fmt.Sprintf("    when    = %q\n", when)
	}
	return fmt.Sprintf("  rule %q {\n%s%s    outcome = %q\n  }\n", name, w, streamSeenEmit, outcome)
}

// streamSeen is one delivery as a rule saw it.
type streamSeen struct {
	At      time.Time         `json:"-"` // when the rule ran (its own clock: the machine's)
	AtMS    int64             `json:"at"`
	ID      string            `json:"id"`
	Attempt int               `json:"attempt"`
	DC      int               `json:"dc"`
	Idle    int64             `json:"idle"`
	Headers map[string]string `json:"headers"`
	Raw     string            `json:"raw"`
}

// streamSeen returns what the rules recorded, in order.
func (e *streamEnv) streamSeen() []streamSeen {
	e.t.Helper()
	var out []streamSeen
	for _, x := range e.streamXRange("seen") {
		var s streamSeen
		if err := json.Unmarshal([]byte(streamField(x, "payload")), &s); err != nil {
			e.t.Fatalf("seen entry %s: %v", x.ID, err)
		}
		// The rule's own clock, not the emit's id: emits are written by the settler a little
		// after the rule decided, and a delay counts from the decision.
		s.At = time.UnixMilli(s.AtMS)
		out = append(out, s)
	}
	return out
}

// streamIDTime is the millisecond part of an entry id: Redis's clock when it was added.
func streamIDTime(t *testing.T, id string) time.Time {
	t.Helper()
	ms, _, ok := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil {
		t.Fatalf("entry id %q is not MS-SEQ", id)
	}
	return time.UnixMilli(n)
}

// streamXAdd adds an entry with fields (name, value, ...) and returns its id.
func (e *streamEnv) streamXAdd(key string, fields ...string) string {
	e.t.Helper()
	id, err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: key, Values: fields}).Result()
	if err != nil {
		e.t.Fatalf("xadd %s: %v", key, err)
	}
	return id
}

func (e *streamEnv) streamXLen(key string) int64 {
	e.t.Helper()
	n, err := e.rdb.XLen(e.ctx, key).Result()
	if err != nil {
		e.t.Fatalf("xlen %s: %v", key, err)
	}
	return n
}

func (e *streamEnv) streamXRange(key string) []redis.XMessage {
	e.t.Helper()
	xs, err := e.rdb.XRange(e.ctx, key, "-", "+").Result()
	if err != nil {
		e.t.Fatalf("xrange %s: %v", key, err)
	}
	return xs
}

// streamGroup creates the group "jobs" on "jobs" at 0, as flowrun would.
func (e *streamEnv) streamGroup() {
	e.t.Helper()
	if err := e.rdb.XGroupCreateMkStream(e.ctx, "jobs", "jobs", "0").Err(); err != nil {
		e.t.Fatalf("xgroup create: %v", err)
	}
}

// streamReadAs delivers up to n new entries of "jobs" to consumer and leaves them pending.
func (e *streamEnv) streamReadAs(consumer string, n int64) []redis.XMessage {
	e.t.Helper()
	res, err := e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{
		Group: "jobs", Consumer: consumer, Streams: []string{"jobs", ">"}, Count: n, Block: -1,
	}).Result()
	if err != nil {
		e.t.Fatalf("xreadgroup as %s: %v", consumer, err)
	}
	return res[0].Messages
}

// streamPendingCount is the group's XPENDING summary count (0 when the group is missing).
func (e *streamEnv) streamPendingCount() int64 {
	e.t.Helper()
	p, err := e.rdb.XPending(e.ctx, "jobs", "jobs").Result()
	if err != nil {
		if strings.Contains(err.Error(), "NOGROUP") {
			return 0
		}
		e.t.Fatalf("xpending: %v", err)
	}
	return p.Count
}

// streamPending is the group's XPENDING details.
func (e *streamEnv) streamPending() []redis.XPendingExt {
	e.t.Helper()
	p, err := e.rdb.XPendingExt(e.ctx, &redis.XPendingExtArgs{
		Stream: "jobs", Group: "jobs", Start: "-", End: "+", Count: 100,
	}).Result()
	if err != nil {
		e.t.Fatalf("xpending: %v", err)
	}
	return p
}

// streamSettled waits until the group has nothing pending and nothing left to read.
func (e *streamEnv) streamSettled(timeout time.Duration) {
	e.t.Helper()
	eventually(e.t, timeout, "group jobs with 0 pending and lag 0", func() bool {
		gs, err := e.rdb.XInfoGroups(e.ctx, "jobs").Result()
		if err != nil || len(gs) != 1 {
			return false
		}
		return gs[0].Pending == 0 && gs[0].Lag == 0
	})
}

// streamWaitSeen waits until the rules recorded at least n deliveries and returns them.
func (e *streamEnv) streamWaitSeen(n int) []streamSeen {
	e.t.Helper()
	eventually(e.t, streamDeadline, fmt.Sprintf("%d deliveries seen", n), func() bool {
		return e.streamXLen("seen") >= int64(n)
	})
	return e.streamSeen()
}

func streamField(x redis.XMessage, name string) string {
	s, _ := x.Values[name].(string)
	return s
}

// streamFields is an entry's fields as strings.
func streamFields(x redis.XMessage) map[string]string {
	m := make(map[string]string, len(x.Values))
	for k, v := range x.Values {
		m[k], _ = v.(string)
	}
	return m
}

// streamStop sends SIGTERM and requires a clean exit.
func streamStop(t *testing.T, p *proc) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; stderr:\n%s", code, p.err.String())
	}
}

func streamCheckMap(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// streamCheckBetween fails unless lo <= d <= hi.
func streamCheckBetween(t *testing.T, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Errorf("%s = %v, want within [%v, %v]", what, d, lo, hi)
	}
}

// streamCheckDeadLetter asserts a dead-letter entry: exactly want plus an x-dead-letter-reason
// naming max_attempts and an RFC 3339 x-failed-at within [since, now].
func streamCheckDeadLetter(t *testing.T, x redis.XMessage, want map[string]string, since time.Time) {
	t.Helper()
	got := streamFields(x)
	if r := got["x-dead-letter-reason"]; !strings.Contains(r, "max_attempts") {
		t.Errorf("x-dead-letter-reason %q does not name max_attempts", r)
	}
	at, err := time.Parse(time.RFC3339, got["x-failed-at"])
	if err != nil {
		t.Errorf("x-failed-at %q is not RFC 3339: %v", got["x-failed-at"], err)
	} else if at.Before(since.Truncate(time.Second)) || at.After(time.Now()) {
		t.Errorf("x-failed-at %v is not between %v and now", at, since)
	}
	rest := maps.Clone(got)
	delete(rest, "x-dead-letter-reason")
	delete(rest, "x-failed-at")
	streamCheckMap(t, "dead-letter fields (without reason and time)", rest, want)
}

// TestStreamAckAndDrop: ack and drop are one XACK on every kind; the entry stays in the
// stream, nothing is pending, no copy is written.
func TestStreamAckAndDrop(t *testing.T) {
	t.Parallel()
	fresh := map[string]map[string]string{
		"stream":   {"h": "v"},
		"claiming": {"h": "v", "x-delivery-count": "0", "x-idle-ms": "0"},
		"reclaim":  {"h": "v", "x-delivery-count": "1", "x-idle-ms": "0"},
	}
	for _, kind := range []string{"stream", "claiming", "reclaim"} {
		for _, outcome := range []string{"ack", "drop"} {
			t.Run(kind+" "+outcome, func(t *testing.T) {
				t.Parallel()
				e := newStreamEnv(t)
				cfg := e.streamConfig(streamPipeline(kind, "", "", streamRule("all", "", outcome)))
				id := e.streamXAdd("jobs", "h", "v", "payload", `{"n":1}`)
				p := start(t, "run", cfg)
				seen := e.streamWaitSeen(1)
				e.streamSettled(streamDeadline)
				streamStop(t, p)

				seen = e.streamSeen()
				if len(seen) != 1 || seen[0].ID != id || seen[0].Attempt != 1 || seen[0].Raw != `{"n":1}` {
					t.Fatalf("seen %+v, want one delivery of %s at attempt 1", seen, id)
				}
				streamCheckMap(t, "headers", seen[0].Headers, fresh[kind])
				xs := e.streamXRange("jobs")
				if len(xs) != 1 || xs[0].ID != id {
					t.Fatalf("stream jobs %v, want only %s", xs, id)
				}
				streamCheckMap(t, "entry", streamFields(xs[0]), map[string]string{"h": "v", "payload": `{"n":1}`})
				if n := e.streamPendingCount(); n != 0 {
					t.Errorf("pending %d, want 0", n)
				}
			})
		}
	}
}

// TestStreamRetryCopies: retry on a stream source XADDs a copy with x-retry-count 1 and acks
// the original; the copy, acked on attempt 2, leaves nothing pending.
func TestStreamRetryCopies(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	rules := streamRule("first", "attempt == 1", "retry") + streamRule("then", "", "ack")
	cfg := e.streamConfig(streamPipeline("stream", "", "", rules))
	id := e.streamXAdd("jobs", "h", "v", "payload", "hello")
	p := start(t, "run", cfg)
	e.streamWaitSeen(2)
	e.streamSettled(streamDeadline)
	streamStop(t, p)

	xs := e.streamXRange("jobs")
	if len(xs) != 2 || xs[0].ID != id {
		t.Fatalf("stream jobs %v, want the original %s and one copy", xs, id)
	}
	streamCheckMap(t, "original", streamFields(xs[0]), map[string]string{"h": "v", "payload": "hello"})
	streamCheckMap(t, "copy", streamFields(xs[1]), map[string]string{"h": "v", "x-retry-count": "1", "payload": "hello"})
	seen := e.streamSeen()
	if len(seen) != 2 {
		t.Fatalf("seen %+v, want 2 deliveries", seen)
	}
	if seen[0].ID != id || seen[0].Attempt != 1 || seen[1].ID != xs[1].ID || seen[1].Attempt != 2 {
		t.Errorf("seen %+v, want %s at attempt 1 then the copy %s at attempt 2", seen, id, xs[1].ID)
	}
	streamCheckMap(t, "first headers", seen[0].Headers, map[string]string{"h": "v"})
	streamCheckMap(t, "copy headers", seen[1].Headers, map[string]string{"h": "v", "x-retry-count": "1"})
	if n := e.streamPendingCount(); n != 0 {
		t.Errorf("pending %d, want 0", n)
	}
}

// TestStreamRetryAfterRuntime: the original is acked at once, the copy is held in the process
// and added after the delay, not before, with x-retry-count 1.
func TestStreamRetryAfterRuntime(t *testing.T) {
	t.Parallel()
	const delay = time.Second
	e := newStreamEnv(t)
	rules := streamRule("first", "attempt == 1", "retry_after('1s')") + streamRule("then", "", "ack")
	cfg := e.streamConfig(streamPipeline("stream", "", "", rules))
	id := e.streamXAdd("jobs", "payload", "hello")
	p := start(t, "run", cfg)
	e.streamWaitSeen(1)
	// While the copy is held, the original is already acknowledged and no copy exists.
	eventually(t, streamDeadline, "original acked", func() bool { return e.streamPendingCount() == 0 })
	if n := e.streamXLen("jobs"); n != 1 {
		t.Fatalf("XLEN jobs = %d while the copy is held, want 1", n)
	}
	seen := e.streamWaitSeen(2)
	e.streamSettled(streamDeadline)
	streamStop(t, p)

	xs := e.streamXRange("jobs")
	if len(xs) != 2 || xs[0].ID != id {
		t.Fatalf("stream jobs %v, want the original and one copy", xs)
	}
	streamCheckMap(t, "copy", streamFields(xs[1]), map[string]string{"x-retry-count": "1", "payload": "hello"})
	// Redis's clock: the copy's id against the moment the first delivery's rule ran.
	streamCheckBetween(t, "copy added after", streamIDTime(t, xs[1].ID).Sub(seen[0].At), delay-5*time.Millisecond, delay+time.Second)
	if seen[1].ID != xs[1].ID || seen[1].Attempt != 2 {
		t.Errorf("second delivery %+v, want the copy %s at attempt 2", seen[1], xs[1].ID)
	}
	streamCheckMap(t, "copy headers", seen[1].Headers, map[string]string{"x-retry-count": "1"})
}

// TestStreamRuntimeCopyPublishedOnStop: a clean stop publishes a held copy at once, and only
// once reading has stopped: the copy is neither taken back by a read still blocked at the stop
// (left pending, or handled again into a second copy) nor lost. The default block of 1s makes
// a read blocked at the stop the rule, not the exception.
func TestStreamRuntimeCopyPublishedOnStop(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	cfg := e.streamConfig(streamPipeline("stream", "    block    = \"1s\"\n", "", streamRule("later", "", "retry_after('1h')")))
	id := e.streamXAdd("jobs", "h", "v", "payload", "hello")
	p := start(t, "run", cfg)
	e.streamWaitSeen(1)
	eventually(t, streamDeadline, "original acked", func() bool { return e.streamPendingCount() == 0 })
	if n := e.streamXLen("jobs"); n != 1 {
		t.Fatalf("XLEN jobs = %d before the stop, want 1", n)
	}
	stopped := time.Now()
	p.signal(syscall.SIGTERM)
	if code := p.wait(5 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; stderr:\n%s", code, p.err.String())
	}
	if d := time.Since(stopped); d > 3*time.Second {
		t.Errorf("stop took %v, want the held copy published at once", d)
	}
	xs := e.streamXRange("jobs")
	if len(xs) != 2 || xs[0].ID != id {
		t.Fatalf("stream jobs %v, want the original and the published copy", xs)
	}
	streamCheckMap(t, "copy", streamFields(xs[1]), map[string]string{"h": "v", "x-retry-count": "1", "payload": "hello"})
	if n := e.streamPendingCount(); n != 0 {
		t.Errorf("pending %d, want 0", n)
	}
}

// TestStreamDurableZSet: retry_after with delayed_retry = "durable_zset" ZADDs the copy to
// "<stream>:delayed" scored by its due time in ms and acks the original; the copy is moved
// back within one block of its due time, with x-retry-count 1, and the zset is left empty.
func TestStreamDurableZSet(t *testing.T) {
	t.Parallel()
	const delay = 1500 * time.Millisecond
	e := newStreamEnv(t)
	rules := streamRule("first", "attempt == 1", "retry_after('1500ms')") + streamRule("then", "", "ack")
	cfg := e.streamConfig(streamPipeline("stream", "", `  delayed_retry = "durable_zset"`, rules))
	id := e.streamXAdd("jobs", "h", "v", "payload", "hello")
	p := start(t, "run", cfg)
	seen := e.streamWaitSeen(1)

	var zs []redis.Z
	eventually(t, streamDeadline, "copy in jobs:delayed and original acked", func() bool {
		var err error
		zs, err = e.rdb.ZRangeWithScores(e.ctx, "jobs:delayed", 0, -1).Result()
		return err == nil && len(zs) == 1 && e.streamPendingCount() == 0
	})
	if n := e.streamXLen("jobs"); n != 1 {
		t.Fatalf("XLEN jobs = %d while the copy is delayed, want 1", n)
	}
	due := time.UnixMilli(int64(zs[0].Score))
	streamCheckBetween(t, "score - first delivery", due.Sub(seen[0].At), delay-5*time.Millisecond, delay+500*time.Millisecond)
	var member struct {
		Key string   `json:"key"`
		ID  string   `json:"id"`
		F   []string `json:"f"`
	}
	if err := json.Unmarshal([]byte(zs[0].Member.(string)), &member); err != nil {
		t.Fatalf("zset member %q: %v", zs[0].Member, err)
	}
	if member.Key != "jobs" || member.ID != id ||
		!slices.Equal(member.F, []string{"h", "v", "x-retry-count", "1", "payload", "hello"}) {
		t.Errorf("zset member %q, want the copy of %s with x-retry-count 1", zs[0].Member, id)
	}

	seen = e.streamWaitSeen(2)
	e.streamSettled(streamDeadline)
	streamStop(t, p)

	xs := e.streamXRange("jobs")
	if len(xs) != 2 || xs[0].ID != id {
		t.Fatalf("stream jobs %v, want the original and the moved copy", xs)
	}
	streamCheckMap(t, "copy", streamFields(xs[1]), map[string]string{"h": "v", "x-retry-count": "1", "payload": "hello"})
	streamCheckBetween(t, "copy moved back after due", streamIDTime(t, xs[1].ID).Sub(due), -5*time.Millisecond, streamBlock+500*time.Millisecond)
	if seen[1].ID != xs[1].ID || seen[1].Attempt != 2 {
		t.Errorf("second delivery %+v, want the copy %s at attempt 2", seen[1], xs[1].ID)
	}
	if n, err := e.rdb.ZCard(e.ctx, "jobs:delayed").Result(); err != nil || n != 0 {
		t.Errorf("ZCARD jobs:delayed = %d (%v), want 0", n, err)
	}
}

// TestStreamRereadsOwnPending: at start a stream source re-reads its own pending entries
// (id 0) before new ones: entries delivered to the same consumer name and never settled are
// handled and acked; one whose data was deleted is acked and logged. --consumer overrides the
// consumer of the file.
func TestStreamRereadsOwnPending(t *testing.T) {
	t.Parallel()
	e := newStreamEnv(t)
	cfg := e.streamConfig(strings.Replace(streamPipeline("stream", "", "", streamRule("all", "", "ack")),
		`consumer = "w1"`, `consumer = "from-the-file"`, 1))
	e.streamGroup()
	a := e.streamXAdd("jobs", "payload", "a")
	b := e.streamXAdd("jobs", "payload", "b")
	gone := e.streamXAdd("jobs", "payload", "gone")
	if got := e.streamReadAs("w1", 3); len(got) != 3 {
		t.Fatalf("read %d entries as w1, want 3", len(got))
	}
	if err := e.rdb.XDel(e.ctx, "jobs", gone).Err(); err != nil {
		t.Fatal(err)
	}
	c := e.streamXAdd("jobs", "payload", "c") // new, never delivered
	p := start(t, "run", "--consumer", "w1", cfg)
	e.streamWaitSeen(3)
	e.streamSettled(streamDeadline)
	eventually(t, streamDeadline, "the deleted entry logged", func() bool { return strings.Contains(p.err.String(), gone) })
	streamStop(t, p)

	var got []string
	for _, s := range e.streamSeen() {
		got = append(got, fmt.Sprintf("%s %s %d", s.ID, s.Raw, s.Attempt))
	}
	want := []string{a + " a 1", b + " b 1", c + " c 1"}
	if !slices.Equal(got, want) {
		t.Errorf("seen %q, want %q", got, want)
	}
	if n := e.streamPendingCount(); n != 0 {
		t.Errorf("pending %d, want 0", n)
	}
	cs, err := e.rdb.XInfoConsumers(e.ctx, "jobs", "jobs").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Name != "w1" {
			t.Errorf("consumer %q in the group, want only w1 (--consumer overrides the file)", c.Name)
		}
	}
}

// TestStreamClaimRetryCycle: on claiming and reclaim, retry and retry_after leave the entry
// pending; it is taken back with the same id and a delivery count one higher, no earlier than
// min_idle (or the longer delay), with x-delivery-count and x-idle-ms per SPEC §6.
func TestStreamClaimRetryCycle(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind, outcome string
		wait          time.Duration // lower bound between the two deliveries
	}{
		{"claiming", "retry", streamMinIdle},
		{"reclaim", "retry", streamMinIdle},
		{"claiming", "retry_after('100ms')", streamMinIdle}, // shorter than min_idle: waits min_idle
		{"reclaim", "retry_after('100ms')", streamMinIdle},
		{"claiming", "retry_after('1200ms')", 1200 * time.Millisecond}, // longer: kept alive
		{"reclaim", "retry_after('1200ms')", 1200 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.kind+" "+c.outcome, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t)
			rules := streamRule("first", "attempt == 1", c.outcome) + streamRule("then", "", "ack")
			cfg := e.streamConfig(streamPipeline(c.kind, "", "", rules))
			id := e.streamXAdd("jobs", "h", "v", "payload", "hello")
			p := start(t, "run", cfg)
			e.streamWaitSeen(1)
			// Left pending with this consumer, delivered once, until taken back.
			pend := e.streamPending()
			if len(pend) != 1 || pend[0].ID != id || pend[0].Consumer != "w1" || pend[0].RetryCount != 1 {
				t.Fatalf("pending after the first delivery %+v, want %s owned by w1 delivered once", pend, id)
			}
			seen := e.streamWaitSeen(2)
			e.streamSettled(streamDeadline)
			streamStop(t, p)

			if n := e.streamXLen("jobs"); n != 1 {
				t.Errorf("XLEN jobs = %d, want 1: no copy on %s", n, c.kind)
			}
			if len(seen) != 2 || seen[0].ID != id || seen[1].ID != id {
				t.Fatalf("seen %+v, want %s twice", seen, id)
			}
			// Up to one keep-alive period (min_idle/3) early for a long delay: that bug is
			// caught reliably by TestStreamClaimLongDelayNeverEarly, not by chance here.
			early := 5 * time.Millisecond
			if c.wait > streamMinIdle {
				early = streamMinIdle / 3
			}
			streamCheckBetween(t, "between deliveries", seen[1].At.Sub(seen[0].At), c.wait-early, c.wait+1500*time.Millisecond)
			first, again := map[string]string{"h": "v"}, map[string]string{"h": "v"}
			idle := seen[1].Headers["x-idle-ms"]
			switch c.kind {
			case "claiming":
				first["x-delivery-count"], first["x-idle-ms"] = "0", "0"
				again["x-delivery-count"], again["x-idle-ms"] = "1", idle
				if n, err := strconv.Atoi(idle); err != nil || n < int(streamMinIdle.Milliseconds()) || seen[1].Idle != int64(n) {
					t.Errorf("claimed x-idle-ms %q (idle_ms %d), want >= %d", idle, seen[1].Idle, streamMinIdle.Milliseconds())
				}
				if seen[0].DC != 0 || seen[1].DC != 1 {
					t.Errorf("delivery_count %d then %d, want 0 then 1", seen[0].DC, seen[1].DC)
				}
			case "reclaim":
				first["x-delivery-count"], first["x-idle-ms"] = "1", "0"
				again["x-delivery-count"], again["x-idle-ms"] = "2", strconv.FormatInt(streamMinIdle.Milliseconds(), 10)
				if seen[0].DC != 1 || seen[1].DC != 2 {
					t.Errorf("delivery_count %d then %d, want 1 then 2", seen[0].DC, seen[1].DC)
				}
			}
			if seen[0].Attempt != 1 || seen[1].Attempt != 2 {
				t.Errorf("attempts %d then %d, want 1 then 2", seen[0].Attempt, seen[1].Attempt)
			}
			streamCheckMap(t, "fresh headers", seen[0].Headers, first)
			streamCheckMap(t, "taken-back headers", seen[1].Headers, again)
		})
	}
}

// TestStreamClaimLongDelayNeverEarly: a retry_after longer than min_idle never brings the
// entry back before its delay. Four delays 25ms apart end at four phases of the keep-alive
// period, so a hold whose last keep-alive falls before its end shows for at least one of them.
func TestStreamClaimLongDelayNeverEarly(t *testing.T) {
	t.Parallel()
	delays := []time.Duration{1200 * time.Millisecond, 1225 * time.Millisecond, 1250 * time.Millisecond, 1275 * time.Millisecond}
	for _, kind := range []string{"claiming", "reclaim"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t)
			rules := streamRule("first", "attempt == 1", "retry_after(headers['d'])") + streamRule("then", "", "ack")
			// A short block: entries are taken back within a few ms of turning idle.
			cfg := e.streamConfig(streamPipeline(kind, "    block    = \"10ms\"\n", "  concurrency = 4\n", rules))
			want := map[string]time.Duration{}
			for _, d := range delays {
				want[e.streamXAdd("jobs", "d", d.String(), "payload", "x")] = d
			}
			p := start(t, "run", cfg)
			seen := e.streamWaitSeen(2 * len(delays))
			e.streamSettled(streamDeadline)
			streamStop(t, p)

			first := map[string]time.Time{}
			for _, s := range seen {
				switch s.Attempt {
				case 1:
					first[s.ID] = s.At
				case 2:
					d := want[s.ID]
					streamCheckBetween(t, fmt.Sprintf("%s with retry_after(%v) back after", s.ID, d), s.At.Sub(first[s.ID]), d-5*time.Millisecond, d+time.Second)
				}
			}
		})
	}
}

// TestStreamClaimHoldEndsWithTheWorker: a retry_after longer than min_idle is honoured only
// while the worker lives; after kill -9 the entry comes back after min_idle, not after the delay.
func TestStreamClaimHoldEndsWithTheWorker(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"claiming", "reclaim"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t)
			rules := streamRule("first", "attempt == 1", "retry_after('1h')") + streamRule("then", "", "ack")
			cfg := e.streamConfig(streamPipeline(kind, "", "", rules))
			id := e.streamXAdd("jobs", "payload", "hello")
			p := start(t, "run", cfg)
			e.streamWaitSeen(1)
			// Held: kept from looking idle well past min_idle while the worker lives.
			eventually(t, streamDeadline, "held past min_idle", func() bool {
				pend := e.streamPending()
				return len(pend) == 1 && time.Since(streamIDTime(t, id)) > 2*streamMinIdle
			})
			if pend := e.streamPending(); len(pend) != 1 || pend[0].Idle >= streamMinIdle || pend[0].RetryCount != 1 {
				t.Fatalf("pending %+v while held, want %s delivered once and idle < min_idle", pend, id)
			}
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			p.wait(5 * time.Second)
			killed := time.Now()

			p = start(t, "run", cfg)
			seen := e.streamWaitSeen(2)
			e.streamSettled(streamDeadline)
			streamStop(t, p)
			if seen[1].ID != id || seen[1].Attempt != 2 {
				t.Errorf("second delivery %+v, want %s at attempt 2", seen[1], id)
			}
			streamCheckBetween(t, "taken back after the kill", seen[1].At.Sub(killed), 0, streamMinIdle+2*time.Second)
		})
	}
}

// TestStreamClaimsGhostEntries: entries delivered to a consumer that never settles them are
// taken over after min_idle, with the delivery count and idle time of SPEC §6.
func TestStreamClaimsGhostEntries(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"claiming", "reclaim"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t)
			cfg := e.streamConfig(streamPipeline(kind, "", "", streamRule("all", "", "ack")))
			e.streamGroup()
			a := e.streamXAdd("jobs", "payload", "a")
			b := e.streamXAdd("jobs", "payload", "b")
			e.streamReadAs("ghost", 2)
			ghostRead := time.Now()
			p := start(t, "run", cfg)
			seen := e.streamWaitSeen(2)
			e.streamSettled(streamDeadline)
			streamStop(t, p)

			if len(seen) != 2 || seen[0].ID != a || seen[1].ID != b {
				t.Fatalf("seen %+v, want %s and %s", seen, a, b)
			}
			for _, s := range seen {
				if d := s.At.Sub(ghostRead); d < streamMinIdle-10*time.Millisecond {
					t.Errorf("%s handled %v after the ghost read it, want >= min_idle %v", s.ID, d, streamMinIdle)
				}
				if s.Attempt != 2 {
					t.Errorf("%s attempt %d, want 2", s.ID, s.Attempt)
				}
				dc, idle := s.Headers["x-delivery-count"], s.Headers["x-idle-ms"]
				if kind == "claiming" {
					n, err := strconv.Atoi(idle)
					if dc != "1" || err != nil || n < int(streamMinIdle.Milliseconds()) {
						t.Errorf("%s headers %v, want x-delivery-count 1 and x-idle-ms >= %d", s.ID, s.Headers, streamMinIdle.Milliseconds())
					}
				} else if dc != "2" || idle != "300" {
					t.Errorf("%s headers %v, want x-delivery-count 2 and x-idle-ms 300", s.ID, s.Headers)
				}
				if len(s.Headers) != 2 {
					t.Errorf("%s headers %v, want only x-delivery-count and x-idle-ms", s.ID, s.Headers)
				}
			}
			if n := e.streamPendingCount(); n != 0 {
				t.Errorf("pending %d, want 0", n)
			}
		})
	}
}

// TestStreamCapDeadLetters: max_attempts = N with a rule that always retries sends the Nth
// failed delivery to the dead-letter stream with every x-… header, then acks the original.
func TestStreamCapDeadLetters(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stream", "claiming", "reclaim"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t)
			extra := "  max_attempts = 3\n  dead_letter  = \"dlq\"\n"
			cfg := e.streamConfig(streamPipeline(kind, "", extra, streamRule("always", "", "retry")))
			id := e.streamXAdd("jobs", "h", "v", "payload", "hello")
			since := time.Now()
			p := start(t, "run", cfg)
			eventually(t, streamDeadline, "one dead letter", func() bool { return e.streamXLen("dlq") == 1 })
			e.streamSettled(streamDeadline)
			streamStop(t, p)

			seen := e.streamSeen()
			if len(seen) != 3 {
				t.Fatalf("seen %+v, want 3 deliveries", seen)
			}
			for i, s := range seen {
				if s.Attempt != i+1 {
					t.Errorf("delivery %d at attempt %d, want %d", i+1, s.Attempt, i+1)
				}
			}
			dl := e.streamXRange("dlq")
			last := seen[2]
			want := map[string]string{
				"h": "v", "payload": "hello", "x-original-key": "jobs", "x-original-id": last.ID, "x-attempts": "3",
			}
			switch kind {
			case "stream":
				// Copies: the third delivery is the second copy, whose id is the one dead-lettered.
				xs := e.streamXRange("jobs")
				if len(xs) != 3 || xs[0].ID != id || seen[1].ID != xs[1].ID || last.ID != xs[2].ID {
					t.Fatalf("stream jobs %v and seen %+v, want the original and two copies, each delivered", xs, seen)
				}
				want["x-retry-count"] = "2"
			case "claiming":
				if last.ID != id {
					t.Errorf("third delivery %s, want the same entry %s", last.ID, id)
				}
				want["x-delivery-count"], want["x-idle-ms"] = "2", last.Headers["x-idle-ms"]
			case "reclaim":
				if last.ID != id {
					t.Errorf("third delivery %s, want the same entry %s", last.ID, id)
				}
				want["x-delivery-count"], want["x-idle-ms"] = "3", "300"
			}
			if kind != "stream" {
				if n := e.streamXLen("jobs"); n != 1 {
					t.Errorf("XLEN jobs = %d, want 1", n)
				}
			}
			streamCheckDeadLetter(t, dl[0], want, since)
			if n := e.streamPendingCount(); n != 0 {
				t.Errorf("pending %d, want 0", n)
			}
		})
	}
}

// TestStreamCapRejectedWithoutDeadLetter: without a dead_letter, the capped delivery is
// acknowledged and logged as rejected, and nothing is written.
func TestStreamCapRejectedWithoutDeadLetter(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stream", "claiming", "reclaim"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t)
			cfg := e.streamConfig(streamPipeline(kind, "", "  max_attempts = 2\n", streamRule("always", "", "retry")))
			e.streamXAdd("jobs", "payload", "hello")
			p := start(t, "run", cfg)
			e.streamWaitSeen(2)
			e.streamSettled(streamDeadline)
			eventually(t, streamDeadline, "rejected logged", func() bool { return strings.Contains(p.err.String(), "rejected") })
			streamStop(t, p)

			if seen := e.streamSeen(); len(seen) != 2 || seen[0].Attempt != 1 || seen[1].Attempt != 2 {
				t.Errorf("seen %+v, want attempts 1 and 2", seen)
			}
			wantLen := int64(1)
			if kind == "stream" {
				wantLen = 2 // the original and one copy
			}
			if n := e.streamXLen("jobs"); n != wantLen {
				t.Errorf("XLEN jobs = %d, want %d", n, wantLen)
			}
			keys, err := e.rdb.Keys(e.ctx, "*").Result()
			slices.Sort(keys)
			if err != nil || !slices.Equal(keys, []string{"jobs", "seen"}) {
				t.Errorf("keys %q (%v), want only jobs and seen", keys, err)
			}
		})
	}
}

// TestStreamCapBeforeHandler: an entry delivered to a ghost consumer as many times as the
// cap goes to the dead letter without the handler running; one delivery fewer runs the
// handler once more, and that last retry is dead-lettered.
func TestStreamCapBeforeHandler(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind         string
		ghost        int // deliveries to the ghost before flowrun starts
		ran          int // handler runs in flowrun
		attempts, dc string
	}{
		{"claiming", 3, 0, "4", "3"},
		{"reclaim", 3, 0, "4", "4"},
		{"claiming", 2, 1, "3", "2"},
		{"reclaim", 2, 1, "3", "3"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s after %d ghost deliveries", c.kind, c.ghost), func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t)
			extra := "  max_attempts = 3\n  dead_letter  = \"dlq\"\n"
			cfg := e.streamConfig(streamPipeline(c.kind, "", extra, streamRule("always", "", "retry")))
			e.streamGroup()
			id := e.streamXAdd("jobs", "h", "v", "payload", "hello")
			e.streamReadAs("ghost", 1)
			for range c.ghost - 1 {
				if err := e.rdb.XClaim(e.ctx, &redis.XClaimArgs{
					Stream: "jobs", Group: "jobs", Consumer: "ghost", MinIdle: 0, Messages: []string{id},
				}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if pend := e.streamPending(); len(pend) != 1 || pend[0].RetryCount != int64(c.ghost) {
				t.Fatalf("pending %+v, want %s delivered %d times", pend, id, c.ghost)
			}
			since := time.Now()
			p := start(t, "run", cfg)
			eventually(t, streamDeadline, "one dead letter", func() bool { return e.streamXLen("dlq") == 1 })
			e.streamSettled(streamDeadline)
			streamStop(t, p)

			seen := e.streamSeen()
			if len(seen) != c.ran {
				t.Fatalf("handler ran %d times (%+v), want %d", len(seen), seen, c.ran)
			}
			dl := e.streamXRange("dlq")
			streamCheckDeadLetter(t, dl[0], map[string]string{
				"h": "v", "payload": "hello", "x-original-key": "jobs", "x-original-id": id,
				"x-attempts": c.attempts, "x-delivery-count": c.dc, "x-idle-ms": streamField(dl[0], "x-idle-ms"),
			}, since)
			if n := e.streamPendingCount(); n != 0 {
				t.Errorf("pending %d, want 0", n)
			}
		})
	}
}

// TestStreamDeletedPendingEntries: a pending entry whose data was deleted (XDEL after it was
// delivered to a ghost) is acknowledged, never left stuck; the live one next to it is handled.
func TestStreamDeletedPendingEntries(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"claiming", "reclaim"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t)
			cfg := e.streamConfig(streamPipeline(kind, "", "", streamRule("all", "", "ack")))
			e.streamGroup()
			gone := e.streamXAdd("jobs", "payload", "gone")
			live := e.streamXAdd("jobs", "payload", "live")
			e.streamReadAs("ghost", 2)
			if err := e.rdb.XDel(e.ctx, "jobs", gone).Err(); err != nil {
				t.Fatal(err)
			}
			p := start(t, "run", cfg)
			seen := e.streamWaitSeen(1)
			e.streamSettled(streamDeadline)
			if kind == "reclaim" {
				// XAUTOCLAIM reports the id deleted; flowrun acks it and says so. (Redis 7's
				// XCLAIM drops such ids from the PEL itself, silently.)
				eventually(t, streamDeadline, "the deleted entry logged", func() bool { return strings.Contains(p.err.String(), gone) })
			}
			streamStop(t, p)

			if len(seen) != 1 || seen[0].ID != live {
				t.Errorf("seen %+v, want only %s", seen, live)
			}
			if n := e.streamPendingCount(); n != 0 {
				t.Errorf("pending %d, want 0", n)
			}
		})
	}
}

// TestStreamKill9MidBacklog: kill -9 while a backlog drains, restart with the same consumer:
// every entry is handled at least once and the group ends with nothing pending.
func TestStreamKill9MidBacklog(t *testing.T) {
	t.Parallel()
	const total = 3000
	for _, kind := range []string{"stream", "claiming"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newStreamEnv(t)
			rules := `  rule "all" {
    emit "stream" {
      key     = "seen"
      payload = "raw"
    }
    outcome = "ack"
  }
`
			cfg := e.streamConfig(streamPipeline(kind, "    batch    = 50\n", "  concurrency = 4\n", rules))
			_, err := e.rdb.Pipelined(e.ctx, func(p redis.Pipeliner) error {
				for i := range total {
					p.XAdd(e.ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"payload", strconv.Itoa(i)}})
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}

			p := start(t, "run", "--consumer", "w1", cfg)
			// Kill while entries are read but not yet acknowledged (pending), a good way into the
			// backlog.
			eventually(t, streamDeadline, "some of the backlog handled, some in flight", func() bool {
				return e.streamXLen("seen") >= 300 && e.streamPendingCount() > 0
			})
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(5 * time.Second); code != -int(syscall.SIGKILL) {
				t.Fatalf("exit %d, want killed by SIGKILL", code)
			}
			handled, pending := e.streamXLen("seen"), e.streamPendingCount()
			t.Logf("killed after %d handled, %d pending", handled, pending)
			if handled >= total {
				t.Fatalf("all %d handled before the kill; the test did not kill mid-backlog", handled)
			}
			if pending == 0 {
				// Rare: everything read was acknowledged between the poll and the kill. The
				// restart still has to finish the backlog.
				t.Logf("nothing pending at the kill")
			}

			p = start(t, "run", "--consumer", "w1", cfg)
			e.streamSettled(30 * time.Second)
			streamStop(t, p)

			got := make(map[string]int, total)
			for _, x := range e.streamXRange("seen") {
				got[streamField(x, "payload")]++
			}
			var missing []int
			for i := range total {
				if got[strconv.Itoa(i)] == 0 {
					missing = append(missing, i)
				}
			}
			if len(missing) > 0 {
				t.Errorf("%d entries never handled, e.g. %v", len(missing), missing[:min(10, len(missing))])
			}
			t.Logf("%d deliveries for %d entries", e.streamXLen("seen"), total)
			if n := e.streamPendingCount(); n != 0 {
				t.Errorf("pending %d, want 0", n)
			}
		})
	}
}

// TestStreamWrongPasswordNotLogged: an authentication failure at start exits 2 naming it,
// and the password appears nowhere in the output.
func TestStreamWrongPasswordNotLogged(t *testing.T) {
	t.Parallel()
	const wrong = "hunter2-wrong"
	srv := redistest.Start(t, "--requirepass", "secret")
	pipeline := streamPipeline("stream", "", "", streamRule("all", "", "ack"))
	cases := []struct{ name, redis, reply string }{
		{"password attribute", fmt.Sprintf("redis \"main\" {\n  url      = %q\n  password = %q\n}\n", srv.URL, wrong), "WRONGPASS"},
		{"password in the url", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n", "redis://:"+wrong+"@"+srv.Addr+"/0"), "WRONGPASS"},
		{"no password", fmt.Sprintf("redis \"main\" {\n  url = %q\n}\n", srv.URL), "NOAUTH"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := writeFile(t, t.TempDir(), "flow.hcl", c.redis+"\n"+pipeline)
			r := flowrun(t, "", "run", "--log-level", "debug", cfg)
			if r.code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", r.code, r.stderr)
			}
			if !strings.Contains(strings.ToLower(r.stderr), "authentication") || !strings.Contains(r.stderr, c.reply) {
				t.Errorf("stderr does not name the authentication failure (%s):\n%s", c.reply, r.stderr)
			}
			if strings.Contains(r.stderr, wrong) || strings.Contains(r.stdout, wrong) {
				t.Errorf("the password is in the output:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
		})
	}
	t.Run("right password", func(t *testing.T) {
		const right = "secret"
		cfg := writeFile(t, t.TempDir(), "flow.hcl",
			fmt.Sprintf("redis \"main\" {\n  url      = %q\n  password = %q\n}\n\n%s", srv.URL, right, pipeline))
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: right})
		t.Cleanup(func() { rdb.Close() })
		ctx := context.Background()
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"payload", "hello"}}).Err(); err != nil {
			t.Fatal(err)
		}
		p := start(t, "run", "--log-level", "debug", cfg)
		eventually(t, streamDeadline, "the entry handled", func() bool { return rdb.XLen(ctx, "seen").Val() == 1 })
		streamStop(t, p)
		if strings.Contains(p.err.String(), right) || strings.Contains(p.out.String(), right) {
			t.Errorf("the password is in the output:\n%s", p.err.String())
		}
	})
}
