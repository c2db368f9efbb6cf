package e2e

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/internal/otlptest"
)

// A run is one trace (SPEC §14, §16): a span for the run from its start to its end, exported by
// whichever process ends the run with the ids its record keeps, and a child per step visit.

// wfTraceConfig is a three-step workflow "order", traced to the collector at endpoint; charge
// fails the run for an amount over 100; delay is a line of ship's attributes (its delay).
func wfTraceConfig(e *streamEnv, endpoint, delay string) string {
	return e.wfConfig(fmt.Sprintf(`telemetry {
  otlp_endpoint = %q
}

workflow "order" {
  run_id     = "payload.order_id"
  on_failure = "stop"
`, endpoint) + wfStart + `
  step "reserve" {
    rule "reserve" {
      output = "'r-' + run.id"
    }
    next = "charge"
  }

  step "charge" {
    rule "declined" {
      when = "input.amount > 100"
      fail = "'declined'"
    }
    rule "paid" {
      output = "input.amount"
    }
    next = "ship"
  }

  step "ship" {
` + delay + `
    rule "ship" {
      output = "'shipped'"
    }
  }
}
`)
}

// runTrace is one run's spans as the collector has them.
type runTrace struct {
	run    otlptest.Span            // the run span
	spans  []otlptest.Span          // every span of its trace
	steps  map[string]otlptest.Span // each step visit's consumer span, by step
	byID   map[string]otlptest.Span
	starts []otlptest.Span // the start pipeline's consumer spans
}

// runSpans finds run id's run span and its trace among spans; nil while its run span is not in.
func runSpans(spans []otlptest.Span, id string) *runTrace {
	var rt *runTrace
	for _, s := range spans {
		if s.Name == "run order" && s.Attrs["flowrun.run_id"] == id {
			if rt != nil {
				return &runTrace{run: otlptest.Span{Name: "two run spans"}}
			}
			rt = &runTrace{run: s}
		}
	}
	if rt == nil {
		return nil
	}
	rt.steps, rt.byID = map[string]otlptest.Span{}, map[string]otlptest.Span{}
	for _, s := range spans {
		if s.TraceID != rt.run.TraceID {
			continue
		}
		rt.spans = append(rt.spans, s)
		rt.byID[s.SpanID] = s
		switch {
		case s.Attrs["flowrun.step"] != "":
			rt.steps[s.Attrs["flowrun.step"]] = s
		case s.Name == "process orders":
			rt.starts = append(rt.starts, s)
		}
	}
	return rt
}

// check asserts the shape of a run's trace: the run span the child of parent ("" a root) with
// the run's attributes, the start delivery's span and each step visit's span (the steps, in
// visit order) its children, within its time, and every parent named in the trace exported.
func (rt *runTrace) check(t *testing.T, id, parent, status string, steps ...string) {
	t.Helper()
	r := rt.run
	if r.ParentID != parent {
		t.Errorf("run %s: run span's parent %q, want %q", id, r.ParentID, parent)
	}
	for k, v := range map[string]string{"flowrun.workflow": "order", "flowrun.run_id": id, "flowrun.status": status} {
		if r.Attrs[k] != v {
			t.Errorf("run %s: run span %s = %q, want %q", id, k, r.Attrs[k], v)
		}
	}
	if len(rt.starts) != 1 || rt.starts[0].ParentID != r.SpanID || rt.starts[0].Attrs["flowrun.outcome"] != "ack" {
		t.Errorf("run %s: start delivery spans %+v; want one, the run span's child, outcome ack", id, rt.starts)
	}
	if len(rt.starts) == 1 && rt.starts[0].End.After(r.End) {
		t.Errorf("run %s: the start delivery's span ends at %v, after the run span (%v)", id, rt.starts[0].End, r.End)
	}
	if len(rt.steps) != len(steps) {
		t.Errorf("run %s: step visit spans %v, want %v", id, keys(rt.steps), steps)
	}
	for i, name := range steps {
		s, ok := rt.steps[name]
		if !ok {
			t.Errorf("run %s: no span of step %s", id, name)
			continue
		}
		if s.ParentID != r.SpanID || s.Attrs["flowrun.visit"] != fmt.Sprint(i+1) || s.Attrs["flowrun.run_id"] != id ||
			s.Attrs["flowrun.workflow"] != "order" || s.Name != "process flowrun:{order}:s:"+name {
			t.Errorf("run %s: step %s span %+v; want the run span's child %s at visit %d", id, name, s, r.SpanID, i+1)
		}
		if s.Start.Before(r.Start) || s.End.After(r.End) {
			t.Errorf("run %s: step %s span %v..%v outside the run span %v..%v", id, name, s.Start, s.End, r.Start, r.End)
		}
	}
	for _, s := range rt.spans {
		if _, ok := rt.byID[s.ParentID]; !ok && s.SpanID != r.SpanID && s.ParentID != parent {
			t.Errorf("run %s: span %q names parent %s, which was not exported", id, s.Name, s.ParentID)
		}
	}
}

func keys(m map[string]otlptest.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkRecord asserts that run id's record keeps its trace context, the run span's ids.
func checkRecord(t *testing.T, e *streamEnv, id string, rt *runTrace, parent string) {
	t.Helper()
	if parent == "" {
		parent = "-"
	}
	want := fmt.Sprintf("00-%s-%s-01 %s", rt.run.TraceID, rt.run.SpanID, parent)
	if got := e.rdb.HGet(e.ctx, "flowrun:{order}:run:"+id, "trace").Val(); got != want {
		t.Errorf("run %s: trace field %q, want %q", id, got, want)
	}
}

// TestWorkflowRunIsOneTrace: three runs through the binary: one from a start message with a
// traceparent (its run span that span's child), one without (its run span the root), one that
// fails at charge (the error recorded on its run span); and a duplicate start message, whose
// spans name no parent that is not exported.
func TestWorkflowRunIsOneTrace(t *testing.T) {
	e := newStreamEnv(t)
	rcv := otlptest.Start(t)
	cfg := wfTraceConfig(e, rcv.URL, "")
	p := start(t, "run", "--consumer", "w1", cfg)
	e.streamXAdd("orders", "payload", `{"order_id":"o-1","amount":12}`,
		"traceparent", "00-"+incomingTrace+"-"+incomingSpan+"-01")
	e.order(`{"order_id":"o-2","amount":20}`)
	e.order(`{"order_id":"o-3","amount":500}`)
	for id, want := range map[string]string{"o-1": "completed", "o-2": "completed", "o-3": "failed"} {
		if r := waitRun(t, cfg, "order", id, "completed", "failed"); r.Status != want {
			t.Fatalf("run %s %s, want %s; history %+v", id, r.Status, want, r.History)
		}
	}
	e.order(`{"order_id":"o-1","amount":1}`) // a duplicate
	eventually(t, wfDeadline, "the duplicate start message settled", func() bool {
		gs, err := e.rdb.XInfoGroups(e.ctx, "orders").Result()
		return err == nil && len(gs) == 1 && gs[0].EntriesRead == 4 && gs[0].Pending == 0
	})
	stopProc(t, p)

	spans := rcv.WaitFor(t, "three run spans and the duplicate's", 10*time.Second, func(s []otlptest.Span) bool {
		n := 0
		for _, sp := range s {
			if sp.Name == "run order" || sp.Name == "start order" {
				n++
			}
		}
		return n >= 4
	})
	one := runSpans(spans, "o-1")
	if one == nil || one.run.TraceID != incomingTrace {
		t.Fatalf("run o-1: run span %+v; want one in the start message's trace %s", one, incomingTrace)
	}
	one.check(t, "o-1", incomingSpan, "completed", "reserve", "charge", "ship")
	checkRecord(t, e, "o-1", one, incomingSpan)

	two := runSpans(spans, "o-2")
	if two == nil || two.run.TraceID == incomingTrace {
		t.Fatalf("run o-2: run span %+v; want one in a trace of its own", two)
	}
	two.check(t, "o-2", "", "completed", "reserve", "charge", "ship")
	checkRecord(t, e, "o-2", two, "")

	three := runSpans(spans, "o-3")
	if three == nil {
		t.Fatal("run o-3: no run span")
	}
	three.check(t, "o-3", "", "failed", "reserve", "charge")
	if !three.run.Error || !slices.Contains(three.run.Events, "exception") {
		t.Errorf("run o-3: run span %+v; want error status and the error recorded", three.run)
	}

	// The duplicate start message made no run: its span's parent is "start order", exported.
	var dup []otlptest.Span
	for _, s := range spans {
		if s.Name == "process orders" && s.Attrs["flowrun.outcome"] == "duplicate" {
			dup = append(dup, s)
		}
	}
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	if len(dup) != 1 {
		t.Fatalf("duplicate start delivery spans %+v; want one", dup)
	}
	if st, ok := byID[dup[0].ParentID]; !ok || st.Name != "start order" || st.Attrs["flowrun.outcome"] != "duplicate" {
		t.Errorf("the duplicate's span's parent %+v; want the exported span \"start order\"", st)
	}
	for _, step := range []string{"reserve", "charge", "ship"} {
		if n := e.stepPending("order", step); n != 0 {
			t.Errorf("step %s: %d pending", step, n)
		}
	}
}

// TestWorkflowTraceAcrossProcesses: a run's start, reserve and charge are handled by one
// process, killed with SIGKILL while the run waits out ship's delay; a second process handles
// ship and ends the run. It is still one trace with one run span, exported by the second
// process with the ids the first one picked and the run's start time.
func TestWorkflowTraceAcrossProcesses(t *testing.T) {
	e := newStreamEnv(t)
	rcv := otlptest.Start(t)
	cfg := wfTraceConfig(e, rcv.URL, `    delay = "3s"`)
	p1 := start(t, "run", "--consumer", "w1", cfg)
	e.order(`{"order_id":"o-1","amount":12}`)
	eventually(t, wfDeadline, "ship's message in the delayed set", func() bool {
		return e.rdb.ZCard(e.ctx, "flowrun:{order}:delayed").Val() == 1
	})
	// What the first process did is exported before it dies (spans go out every second).
	rcv.WaitFor(t, "the first process's step spans", 10*time.Second, func(s []otlptest.Span) bool {
		n := 0
		for _, sp := range s {
			if sp.Attrs["flowrun.step"] == "reserve" || sp.Attrs["flowrun.step"] == "charge" {
				n++
			}
		}
		return n == 2
	})
	p1.signal(syscall.SIGKILL)
	p1.wait(10 * time.Second)
	if n := len(rcv.Spans()); n == 0 || slices.ContainsFunc(rcv.Spans(), func(s otlptest.Span) bool { return s.Name == "run order" }) {
		t.Fatalf("before the second process: %d spans, a run span among them", n)
	}
	p2 := start(t, "run", "--consumer", "w2", cfg)
	if r := waitRun(t, cfg, "order", "o-1", "completed", "failed"); r.Status != "completed" {
		t.Fatalf("run %s; history %+v", r.Status, r.History)
	}
	stopProc(t, p2)
	spans := rcv.WaitFor(t, "the run span", 10*time.Second, func(s []otlptest.Span) bool { return runSpans(s, "o-1") != nil })
	rt := runSpans(spans, "o-1")
	rt.check(t, "o-1", "", "completed", "reserve", "charge", "ship")
	checkRecord(t, e, "o-1", rt, "")
	if d := rt.steps["ship"].Start.Sub(rt.steps["charge"].End); d < 2900*time.Millisecond {
		t.Errorf("ship began %v after charge ended, want ship's 3s delay", d)
	}
	if n := slices.IndexFunc(spans, func(s otlptest.Span) bool { return s.Name == "run order" }); rt.run.Start.After(rt.starts[0].End) ||
		slices.ContainsFunc(spans[n+1:], func(s otlptest.Span) bool { return s.Name == "run order" }) {
		t.Errorf("run span %+v: want one, from the run's start", rt.run)
	}
	if n := e.rdb.ZCard(e.ctx, "flowrun:{order}:delayed").Val(); n != 0 {
		t.Errorf("%d left in the delayed set", n)
	}
	for _, step := range []string{"reserve", "charge", "ship"} {
		if n := e.stepPending("order", step); n != 0 {
			t.Errorf("step %s: %d pending", step, n)
		}
	}
}

// TestWorkflowTraceRunsStartAndRetry: a run started by `runs start` is traced as one started by
// a message (its run span a root, exported by the process that ends it); `runs retry` of the
// failed run gives it a second run span, the first one's child, begun at the retry, with the
// retried visit under it.
func TestWorkflowTraceRunsStartAndRetry(t *testing.T) {
	e := newStreamEnv(t)
	rcv := otlptest.Start(t)
	cfg := wfTraceConfig(e, rcv.URL, "")
	p := start(t, "run", "--consumer", "w1", cfg)
	r := flowrun(t, "", "runs", "start", "order", "--input", `{"amount":500}`, cfg)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("runs start: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitRun(t, cfg, "order", id, "failed")
	retryAt := time.Now()
	if r := flowrun(t, "", "runs", "retry", "order", id, cfg); r.code != 0 {
		t.Fatalf("runs retry: exit %d\n%s", r.code, r.stderr)
	}
	eventually(t, wfDeadline, "the retried run to fail again", func() bool {
		run, ok := runsShow(t, cfg, "order", id)
		return ok && run.Status == "failed" && strings.Count(strings.Join(run.outcomes(), " "), "failed") == 2
	})
	stopProc(t, p)
	spans := rcv.WaitFor(t, "two run spans", 10*time.Second, func(s []otlptest.Span) bool {
		return len(slices.DeleteFunc(slices.Clone(s), func(s otlptest.Span) bool { return s.Name != "run order" })) == 2
	})
	var runSpans, charges []otlptest.Span
	for _, s := range spans {
		switch {
		case s.Name == "run order":
			runSpans = append(runSpans, s)
		case s.Attrs["flowrun.step"] == "charge":
			charges = append(charges, s)
		}
	}
	first, second := runSpans[0], runSpans[1]
	if first.ParentID != "" || first.Attrs["flowrun.run_id"] != id || first.Attrs["flowrun.status"] != "failed" || !first.Error {
		t.Errorf("first run span %+v; want a failed root of run %s", first, id)
	}
	if second.TraceID != first.TraceID || second.ParentID != first.SpanID || second.Start.Before(retryAt.Truncate(time.Millisecond)) ||
		second.Attrs["flowrun.status"] != "failed" {
		t.Errorf("second run span %+v; want the first's child, begun at the retry (%v)", second, retryAt)
	}
	if len(charges) != 2 || charges[0].ParentID != first.SpanID || charges[1].ParentID != second.SpanID {
		t.Errorf("charge spans %+v; want one under each run span", charges)
	}
	if tc := e.rdb.HGet(e.ctx, "flowrun:{order}:run:"+id, "trace").Val(); !strings.HasPrefix(tc, fmt.Sprintf("00-%s-%s-01 %s ", first.TraceID, second.SpanID, first.SpanID)) {
		t.Errorf("trace field %q after the retry", tc)
	}
	if n := e.stepPending("order", "charge"); n != 0 {
		t.Errorf("charge: %d pending", n)
	}
}

// TestWorkflowTraceAcrossWait: a run waits at a wait step while the process that parked it is
// killed with SIGKILL; a second process takes its event and ends it. A second run's event comes
// before the run (kept for it). Each run is still one trace with one run span, its visits
// (the parked one, the event's, the one after) under it.
func TestWorkflowTraceAcrossWait(t *testing.T) {
	e := newStreamEnv(t)
	rcv := otlptest.Start(t)
	cfg := e.wfConfig(fmt.Sprintf("telemetry {\n  otlp_endpoint = %q\n}\n\n", rcv.URL) + wfWait("1h", "expire"))
	p1 := start(t, "run", "--consumer", "w1", cfg)
	e.order(`{"order_id":"o-1"}`)
	e.waitingAtPay("o-1")
	rcv.WaitFor(t, "the first process's spans of o-1", 10*time.Second, func(s []otlptest.Span) bool {
		return slices.ContainsFunc(s, func(s otlptest.Span) bool { return s.Attrs["flowrun.step"] == "pay" })
	})
	p1.signal(syscall.SIGKILL)
	p1.wait(10 * time.Second)
	p2 := start(t, "run", "--consumer", "w2", cfg)
	e.payment(`{"order_id":"o-1","amount":12}`)
	e.payment(`{"order_id":"o-2","amount":7}`)
	eventually(t, wfDeadline, "o-2's event kept", func() bool {
		return e.rdb.HExists(e.ctx, "flowrun:{order}:kept", "pay\no-2").Val()
	})
	e.order(`{"order_id":"o-2"}`)
	for _, id := range []string{"o-1", "o-2"} {
		if r := waitRun(t, cfg, "order", id, "completed", "failed"); r.Status != "completed" {
			t.Fatalf("run %s %s; history %+v", id, r.Status, r.History)
		}
	}
	e.paymentsSettled()
	stopProc(t, p2)
	spans := rcv.WaitFor(t, "both run spans", 10*time.Second, func(s []otlptest.Span) bool {
		return runSpans(s, "o-1") != nil && runSpans(s, "o-2") != nil
	})
	for _, id := range []string{"o-1", "o-2"} {
		rt := runSpans(spans, id)
		rt.check(t, id, "", "completed", "reserve", "pay", "ship")
		checkRecord(t, e, id, rt, "")
	}
	for _, step := range []string{"reserve", "pay", "ship"} {
		if n := e.stepPending("order", step); n != 0 {
			t.Errorf("step %s: %d pending", step, n)
		}
	}
}

// TestWorkflowNoTelemetryAddsNothing (SPEC §14): without tracing, a run started by a message
// with a traceparent keeps no trace context, and its step messages carry no traceparent.
func TestWorkflowNoTelemetryAddsNothing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	e := newStreamEnv(t)
	cfg := e.wfConfig(`workflow "order" {
  run_id = "payload.order_id"
` + wfStart + `
  step "reserve" {
    rule "reserve" {
      output = "'r'"
    }
    next = "charge"
  }

  step "charge" {
    rule "charge" {
      output = "'c'"
    }
  }
}
`)
	p := start(t, "run", "--consumer", "w1", cfg)
	e.streamXAdd("orders", "payload", `{"order_id":"o-1"}`, "traceparent", "00-"+incomingTrace+"-"+incomingSpan+"-01")
	if r := waitRun(t, cfg, "order", "o-1", "completed", "failed"); r.Status != "completed" {
		t.Fatalf("run %s; history %+v", r.Status, r.History)
	}
	stopProc(t, p)
	if e.rdb.HExists(e.ctx, "flowrun:{order}:run:o-1", "trace").Val() {
		t.Errorf("the run record has a trace field without tracing: %v", e.rdb.HGetAll(e.ctx, "flowrun:{order}:run:o-1").Val())
	}
	for _, step := range []string{"reserve", "charge"} {
		msgs := e.rdb.XRange(e.ctx, "flowrun:{order}:s:"+step, "-", "+").Val()
		if len(msgs) == 0 {
			t.Errorf("step %s: no message to look at", step)
		}
		for _, m := range msgs {
			if _, ok := m.Values["traceparent"]; ok {
				t.Errorf("step %s message %s carries a traceparent without tracing: %v", step, m.ID, m.Values)
			}
		}
		if n := e.stepPending("order", step); n != 0 {
			t.Errorf("step %s: %d pending", step, n)
		}
	}
}

// TestWorkflowTraceCancelFromCommandLine: `runs cancel` of a waiting run under on_failure =
// "stop" ends it in the command's own process, which exports the run span (status cancelled).
func TestWorkflowTraceCancelFromCommandLine(t *testing.T) {
	e := newStreamEnv(t)
	rcv := otlptest.Start(t)
	cfg := e.wfConfig(fmt.Sprintf("telemetry {\n  otlp_endpoint = %q\n}\n\n", rcv.URL) + wfWait("1h", "expire"))
	p := start(t, "run", "--consumer", "w1", cfg)
	e.order(`{"order_id":"o-1"}`)
	e.waitingAtPay("o-1")
	if r := flowrun(t, "", "runs", "cancel", "order", "o-1", cfg); r.code != 0 {
		t.Fatalf("runs cancel: exit %d\n%s", r.code, r.stderr)
	}
	if st := e.runField("o-1", "status"); st != "cancelled" {
		t.Fatalf("run status %q after runs cancel", st)
	}
	// The command exported the run span before it exited.
	if runSpans(rcv.Spans(), "o-1") == nil {
		t.Fatal("no run span after runs cancel exited")
	}
	stopProc(t, p) // and the run process its visits' spans
	rt := runSpans(rcv.Spans(), "o-1")
	rt.check(t, "o-1", "", "cancelled", "reserve", "pay")
	if rt.run.Error {
		t.Errorf("a cancelled run's span has error status: %+v", rt.run)
	}
	for _, step := range []string{"reserve", "pay"} {
		if n := e.stepPending("order", step); n != 0 {
			t.Errorf("step %s: %d pending", step, n)
		}
	}
}
