package main

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// The data decide how much work each side does: both must agree with the rule's condition.
func TestRetriesAreOneInTen(t *testing.T) {
	for _, n := range []int{100, 1000, 200_000} {
		if got, want := expectedRetries(n), n/10; got != want {
			t.Errorf("expectedRetries(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestPayloadIsOrder(t *testing.T) {
	for _, i := range []int{0, 1, 5, 42, 199_999} {
		var got order
		if err := json.Unmarshal([]byte(payload(i)), &got); err != nil {
			t.Fatalf("payload(%d) = %s: %v", i, payload(i), err)
		}
		if want := orderFor(i); got != want {
			t.Errorf("payload(%d) decodes to %+v, want %+v", i, got, want)
		}
	}
}

func TestRouteRules(t *testing.T) {
	retried := 5 // EUR, amount 85.5
	if o := orderFor(retried); !retryFirst(&o, 1) {
		t.Fatalf("entry %d (%+v) is not retried on attempt 1", retried, o)
	}
	p := payload(retried)
	tests := []struct {
		name       string
		values     map[string]any
		wantKey    string
		wantFields []string
	}{
		{"first attempt is copied", map[string]any{"payload": p}, "in", []string{retryCountHeader, "1", "payload", p}},
		{"the copy is emitted", map[string]any{"payload": p, retryCountHeader: "1"}, "out", []string{"routed", "yes", "payload", p}},
		{"headers are kept, sorted", map[string]any{"payload": p, "zz": "2", "a": "1"}, "in", []string{"a", "1", retryCountHeader, "1", "zz", "2", "payload", p}},
		{"others are emitted", map[string]any{"payload": payload(1)}, "out", []string{"routed", "yes", "payload", payload(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, fields, err := routeRules(redis.XMessage{ID: "1-0", Values: tt.values}, "in", "out")
			if err != nil {
				t.Fatal(err)
			}
			if key != tt.wantKey || !slices.Equal(fields, tt.wantFields) {
				t.Errorf("got %s %q, want %s %q", key, fields, tt.wantKey, tt.wantFields)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	v := make([]int64, 1000)
	for i := range v {
		v[i] = int64(i + 1)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		if got := percentile(v, c.q); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := percentile([]int64{7}, 0.999); got != 7*time.Microsecond {
		t.Errorf("one sample: got %v", got)
	}
}

func TestThousands(t *testing.T) {
	for f, want := range map[float64]string{0: "0", 999.4: "999", 1000: "1,000", 414237.6: "414,238", 1234567: "1,234,567"} {
		if got := thousands(f); got != want {
			t.Errorf("thousands(%v) = %q, want %q", f, got, want)
		}
	}
}

// BenchmarkRouteRules is the plain consumer's work per delivery in the rules workload (decode,
// decide, build the XADD fields), to set beside flowrun's rule evaluation in
// go test -bench RuleSet ./rules/.
func BenchmarkRouteRules(b *testing.B) {
	msgs := make([]redis.XMessage, 100)
	for i := range msgs {
		msgs[i] = redis.XMessage{ID: "1-0", Values: map[string]any{"payload": payload(i)}}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, _, err := routeRules(msgs[i%len(msgs)], "in", "out"); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func TestMedians(t *testing.T) {
	run := func(plain, flow time.Duration, rss int64) results {
		return results{rows: []row{{name: "noop", plain: span{count: 1000, took: plain}, flowrun: span{count: 1000, took: flow}, rss: rss}}}
	}
	got := medians([]results{run(time.Second, 4*time.Second, 10), run(3*time.Second, 2*time.Second, 30), run(2*time.Second, 3*time.Second, 20)})
	want := row{name: "noop", plain: span{count: 1000, took: 2 * time.Second}, flowrun: span{count: 1000, took: 3 * time.Second}, rss: 30}
	if len(got.rows) != 1 || got.rows[0] != want {
		t.Errorf("got %+v, want %+v", got.rows, want)
	}
}

func TestSummarize(t *testing.T) {
	start := time.UnixMicro(1_000_000_000)
	warm := start.UnixMicro() + latencyWarmup.Microseconds()
	o := offered{sent: 3, took: time.Second, from: warm, end: start.Add(time.Second), late: 1}
	samples := []sample{
		{sent: start.UnixMicro(), handled: start.UnixMicro() + 5000}, // warm-up: not counted
		{sent: warm, handled: warm + 100},
		{sent: warm + 10, handled: o.end.UnixMicro() + 20_000},
	}
	got, err := summarize(samples, o)
	if err != nil {
		t.Fatal(err)
	}
	if got.samples != 2 || got.p50 != 100*time.Microsecond || got.behind != 20*time.Millisecond || got.late != 0.5 {
		t.Errorf("got %+v", got)
	}
	if _, err := summarize(samples[:2], o); err == nil {
		t.Error("a missing entry is not reported")
	}
}

// The plain latency child's lines are read back as samples; a line that is not one is an error,
// and a line not yet ended is neither counted nor parsed.
func TestCollectorPlain(t *testing.T) {
	c := testCollector(t, parsePlain)
	c.file.WriteString("100 250\n200 320\n")
	if n := c.len(); n != 2 {
		t.Fatalf("counted %d lines, want 2", n)
	}
	c.file.WriteString("not a sample\n300 4")
	if n := c.len(); n != 3 {
		t.Fatalf("counted %d lines, want 3", n)
	}
	if got := c.all(); !slices.Equal(got, []sample{{100, 250}, {200, 320}}) {
		t.Fatalf("samples %v", got)
	}
	if c.failed() == nil {
		t.Fatal("a line that is not a sample went unnoticed")
	}
}

// flowrun's records are read back by their headers.
func TestCollectorRecords(t *testing.T) {
	c := testCollector(t, parseRecord)
	c.file.WriteString(`{"key":"latency","headers":{"handled":"250","sent":"100"},"payload":"x"}` + "\n")
	if got := c.all(); !slices.Equal(got, []sample{{100, 250}}) || c.failed() != nil {
		t.Fatalf("samples %v, error %v", got, c.failed())
	}
}

func testCollector(t *testing.T, parse func([]byte) (sample, error)) *collector {
	t.Helper()
	c, err := newCollector(t.TempDir(), "side", parse)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// The latency table shows each side's CPU time per entry and flowrun's over plain's, taken from
// the run with the median p99 like the percentiles, and flags a run in which the machine stalled.
func TestLatencyTable(t *testing.T) {
	run := func(p99, plainCPU, flowCPU time.Duration) results {
		return results{lat: []latencyRow{{
			name:    "latency",
			offered: 10_000,
			plain:   latencies{p50: 100 * time.Microsecond, p99: 300 * time.Microsecond, p999: time.Millisecond, cpu: plainCPU},
			flowrun: latencies{p50: 120 * time.Microsecond, p99: p99, p999: time.Millisecond, cpu: flowCPU},
		}}}
	}
	us := time.Microsecond
	got := medians([]results{run(900*us, 30*us, 90*us), run(400*us, 30*us, 60*us), run(200*us, 30*us, 10*us)})
	var out strings.Builder
	got.print(&out, options{duration: 5 * time.Second})
	for _, want := range []string{"CPU/entry", "400 µs", "30.0 µs", "60.0 µs", "2.00×", "late", "0.0 %"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "stalled") || strings.Contains(out.String(), "bursts") {
		t.Errorf("a quiet run is said to have stalled:\n%s", out.String())
	}

	// A plain p99 over 1 ms is the machine's, and the table says so.
	got.lat[0].plain.p99 = 3 * time.Millisecond
	out.Reset()
	got.print(&out, options{duration: 5 * time.Second})
	if !strings.Contains(out.String(), "the machine stalled") {
		t.Errorf("a stalled run is not flagged:\n%s", out.String())
	}

	// A side with more than 1 % of its entries sent late in backlogs has a burst's p99.
	got.lat[0].flowrun.late = 0.125
	out.Reset()
	got.print(&out, options{duration: 5 * time.Second})
	if !strings.Contains(out.String(), "12.5 %") || !strings.Contains(out.String(), "backlog bursts") {
		t.Errorf("late entries are not shown and flagged:\n%s", out.String())
	}
}

// Steal time is read from /proc/stat's first line, over the eight states before the guest ones.
func TestStealShare(t *testing.T) {
	a, ok := parseCPUTimes([]byte("cpu  100 0 50 800 0 0 10 40 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"))
	if !ok || a.total != 1000 || a.steal != 40 {
		t.Fatalf("got %+v, %v", a, ok)
	}
	b, _ := parseCPUTimes([]byte("cpu  200 0 100 1340 0 0 20 140 7 0\n"))
	if got := stealShare(a, b); got < 0.1249 || got > 0.1251 {
		t.Errorf("steal share %v, want 0.125 (100 of 800 ticks)", got)
	}
	if _, ok := parseCPUTimes([]byte("intr 1 2 3\n")); ok {
		t.Error("a line that is not the cpu line is read")
	}
}

// The producer's senders share one schedule: a turn sends every entry due before its end,
// each once, numbered from first, each stamped.
func TestOfferSendsTheSchedule(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	o, err := offer(ctx, rdb, "s", 2000, 250*time.Millisecond, 10)
	if err != nil {
		t.Fatal(err)
	}
	if o.sent != 500 {
		t.Fatalf("sent %d, want 500 (2,000 a second for 250 ms)", o.sent)
	}
	ms, err := rdb.XRange(ctx, "s", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, m := range ms {
		var got order
		if err := json.Unmarshal([]byte(m.Values["payload"].(string)), &got); err != nil {
			t.Fatalf("entry %s: %v", m.ID, err)
		}
		if _, err := strconv.ParseInt(m.Values["sent"].(string), 10, 64); err != nil {
			t.Fatalf("entry %s: sent: %v", m.ID, err)
		}
		if seen[got.ID] || got.ID < 10 || got.ID >= 510 {
			t.Fatalf("entry %s: payload %d sent twice or out of 10 … 509", m.ID, got.ID)
		}
		seen[got.ID] = true
	}
	if len(ms) != 500 {
		t.Fatalf("the stream holds %d entries, want 500", len(ms))
	}
}

func TestProcCPU(t *testing.T) {
	c0 := procCPU(os.Getpid())
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	if c1 := procCPU(os.Getpid()); c1 <= c0 {
		t.Fatalf("procCPU did not grow over 50ms of spinning: %s then %s", c0, c1)
	}
	if c := procCPU(-1); c != 0 {
		t.Fatalf("procCPU of no process = %s, want 0", c)
	}
}

func TestRowMisses(t *testing.T) {
	sp := func(count int64, took, cpu time.Duration) span { return span{count: count, took: took, cpu: cpu} }
	ok := row{plain: sp(1000, time.Second, time.Second), flowrun: sp(1000, time.Second, 1200*time.Millisecond)}
	if m := ok.misses(); m != "" {
		t.Fatalf("a row within both targets is flagged %q", m)
	}
	bad := row{plain: sp(1000, time.Second, time.Second), flowrun: sp(800, time.Second, 1300*time.Millisecond)}
	if m := bad.misses(); m != "  <- below 0.90  <- CPU > 1.25×" {
		t.Fatalf("misses = %q", m)
	}
	// The workflow row is held to its own rate target, not to the CPU ratio.
	wf := row{target: 0.60, plain: sp(1000, time.Second, time.Second), flowrun: sp(610, time.Second, 3*time.Second)}
	if m := wf.misses(); m != "" {
		t.Fatalf("a workflow row at 0.61 is flagged %q", m)
	}
	wf.flowrun.count = 590
	if m := wf.misses(); m != "  <- below 0.60" {
		t.Fatalf("workflow misses = %q", m)
	}
	// A flow row is held to its CPU against the pipeline without the block, not to a rate.
	flow := row{baseline: "without the block", plain: sp(1000, time.Second, time.Second), flowrun: sp(1000, 2*time.Second, 1250*time.Millisecond)}
	if m := flow.misses(); m != "" {
		t.Fatalf("a flow row within 1.30× is flagged %q", m)
	}
	flow.flowrun.cpu = 1350 * time.Millisecond
	if m := flow.misses(); m != "  <- CPU > 1.30×" {
		t.Fatalf("flow misses = %q", m)
	}
}

// The plain side of the workflow workload runs every run through its three steps, leaving what
// checkWorkflow checks, and a start message for a run that exists starts nothing.
func TestPlainWorkflow(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()
	const prefix, runs = "bench:{wfplain}", 50
	if err := preloadStreams(ctx, rdb, runs, prefix+":start"); err != nil {
		t.Fatal(err)
	}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: prefix + ":start", Values: []string{"payload", payload(7)}})
	b := &bench{o: options{batch: 8}, rdb: rdb}
	if err := b.plainWorkflow(ctx, prefix, runs); err != nil {
		t.Fatal(err)
	}
	if err := checkWorkflow(ctx, rdb, prefix, "g", runs); err != nil {
		t.Fatal(err)
	}
	hist, err := rdb.LRange(ctx, prefix+":hist:7", 0, -1).Result()
	if err != nil || len(hist) != 5 || !strings.Contains(hist[3], `"step":"three","visit":3`) || !strings.Contains(hist[4], `"completed"`) {
		t.Fatalf("history of run 7: %v %q", err, hist)
	}
	out, _ := rdb.HGetAll(ctx, prefix+":out:7").Result()
	if len(out) != 3 || out["two"] != `"two"` {
		t.Fatalf("outputs of run 7: %v", out)
	}
	if ttl := rdb.TTL(ctx, prefix+":run:7").Val(); ttl <= 0 {
		t.Fatalf("run 7 does not expire: %v", ttl)
	}
	if n := rdb.HGet(ctx, prefix+":active", "three").Val(); n != "0" {
		t.Fatalf("active in three: %q", n)
	}
}

func TestWorkflowOrderID(t *testing.T) {
	for _, i := range []int{0, 7, 199_999} {
		if got := wfOrderID(payload(i)); got != strconv.Itoa(i) {
			t.Errorf("wfOrderID(%s) = %q", payload(i), got)
		}
	}
}

// A row's unit and own target survive the medians of several runs.
func TestMediansKeepUnitAndTarget(t *testing.T) {
	r := row{name: "workflow", unit: "run", target: wfMinRatio}
	m := medians([]results{{rows: []row{r}}, {rows: []row{r}}, {rows: []row{r}}})
	if got := m.rows[0]; got.unit != "run" || got.target != wfMinRatio {
		t.Fatalf("medians lost the unit or target: %+v", got)
	}
}
