package workflow

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// order is SPEC §16's example, without the wait and the fan-out.
func order(t *testing.T, onFailure string) *Graph {
	t.Helper()
	g, err := NewGraph("order", onFailure, time.Hour, []StepDef{
		{Name: "reserve", Next: "charge", Compensate: "release"},
		{Name: "charge", Next: "check", Compensate: "refund", Timeout: 10 * time.Minute},
		{Name: "check", Next: "ship"},
		{Name: "ship", Timeout: time.Hour, OnTimeout: "refund"},
		{Name: "release"},
		{Name: "refund", Delay: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// action is one settlement a test applies to the run.
type action struct {
	kind  string // ack, drop, dead, timeout, cancel, retry
	run   *engine.Run
	label string
}

func ack() action                 { return action{kind: "ack"} }
func ackWith(r engine.Run) action { return action{kind: "ack", run: &r} }
func drop() action                { return action{kind: "drop"} }
func dead() action                { return action{kind: "dead"} }
func timeout() action             { return action{kind: "timeout"} }
func cancelRun() action           { return action{kind: "cancel"} }
func retryRun() action            { return action{kind: "retry"} }
func outcomes(st *State) []string {
	return eventsOf(st, func(e Event) string { return e.Step + ":" + e.Outcome })
}

func eventsOf(st *State, f func(Event) string) []string {
	var out []string
	for _, e := range st.History {
		out = append(out, f(e))
	}
	return out
}

// play starts a run and applies the actions, checking each transition applies.
func play(t *testing.T, g *Graph, acts ...action) (*State, []Transition) {
	t.Helper()
	st, tr := g.Start("r1", json.RawMessage(`{"sku":"a"}`), t0)
	ts := []Transition{tr}
	for i, a := range acts {
		now := t0.Add(time.Duration(i+1) * time.Second)
		var tr Transition
		switch a.kind {
		case "ack", "drop":
			v := a.run
			if v == nil {
				v = &engine.Run{}
			}
			tr = g.Finish(st, v, 1, a.kind, now)
		case "dead":
			tr = g.Fail(st, 3, "cap reached", now)
		case "timeout":
			tr = g.TimedOut(st, now)
		case "cancel":
			tr = g.Cancel(st, now)
		case "retry":
			var err error
			if tr, err = g.Retry(st, now); err != nil {
				t.Fatalf("action %d: %v", i, err)
			}
		}
		if !st.Apply(tr) {
			t.Fatalf("action %d (%s at %s, visit %d): transition of visit %d did not apply", i, a.kind, st.Step, st.Visit, tr.Visit)
		}
		ts = append(ts, tr)
	}
	return st, ts
}

func TestStart(t *testing.T) {
	g := order(t, "")
	st, tr := g.Start("r1", json.RawMessage(`{}`), t0)
	if st.Status != Running || st.Step != "reserve" || st.Visit != 1 || st.Workflow != "order" || !st.StartedAt.Equal(t0) {
		t.Fatalf("state %+v", st)
	}
	if tr.Visit != 0 || tr.Enter != "reserve" || tr.Done || len(tr.History) != 1 || tr.History[0].Outcome != EventStarted {
		t.Fatalf("transition %+v", tr)
	}
	if g.OnFailure != OnFailureCompensate {
		t.Fatalf("default on_failure %q", g.OnFailure)
	}
}

func TestRuns(t *testing.T) {
	for _, tc := range []struct {
		name       string
		onFailure  string
		acts       []action
		status     Status
		step       string
		visit      int
		path       []string
		history    []string
		err        string
		failedStep string
		compd      bool
		done       bool // the last transition ended the run
	}{
		{name: "completes", acts: []action{ack(), ack(), ack(), ack()}, status: Completed, visit: 4,
			path: []string{"reserve", "charge", "check", "ship"}, done: true,
			history: []string{":started", "reserve:ack", "charge:ack", "check:ack", "ship:ack", "ship:completed"}},
		{name: "rule next", acts: []action{ack(), ack(), ackWith(engine.Run{Next: "refund"}), ack()}, status: Completed, visit: 4,
			path: []string{"reserve", "charge", "check", "refund"}, done: true},
		{name: "rule complete", acts: []action{ack(), ack(), ackWith(engine.Run{Complete: true, Next: "ship"})}, status: Completed, visit: 3,
			path: []string{"reserve", "charge", "check"}, done: true},
		{name: "rule next unknown fails", acts: []action{ackWith(engine.Run{Next: "nope"})}, status: Failed, visit: 1,
			err: `next names no step: "nope"`, failedStep: "reserve", done: true},
		{name: "rule fail compensates", acts: []action{ack(), ack(), ackWith(engine.Run{Fail: "declined"}), ack(), ack()},
			status: Failed, visit: 5, err: "declined", failedStep: "check", compd: true, done: true,
			path:    []string{"reserve", "charge", "refund", "release"},
			history: []string{":started", "reserve:ack", "charge:ack", "check:ack", "refund:ack", "release:ack", "release:failed"}},
		{name: "dead letter compensates in reverse", acts: []action{ack(), ack(), dead(), ack(), ack()},
			status: Failed, visit: 5, err: "cap reached", failedStep: "check", compd: true, done: true,
			path:    []string{"reserve", "charge", "refund", "release"},
			history: []string{":started", "reserve:ack", "charge:ack", "check:dead_letter", "refund:ack", "release:ack", "release:failed"}},
		{name: "first step fails, nothing to compensate", acts: []action{dead()}, status: Failed, visit: 1,
			err: "cap reached", failedStep: "reserve", done: true, history: []string{":started", "reserve:dead_letter", "reserve:failed"}},
		{name: "stop keeps state", onFailure: "stop", acts: []action{ack(), dead()}, status: Failed, visit: 2,
			err: "cap reached", failedStep: "charge", path: []string{"reserve"}, done: true},
		{name: "stop then retry completes", onFailure: "stop", acts: []action{ack(), dead(), retryRun(), ack(), ack(), ack()},
			status: Completed, visit: 5, path: []string{"reserve", "charge", "check", "ship"}, done: true},
		{name: "compensation fails", acts: []action{ack(), ack(), dead(), dead()}, status: CompensationFailed, visit: 4,
			err: "cap reached", failedStep: "check", compd: true, path: []string{"reserve", "charge"}, done: true},
		{name: "compensation times out", acts: []action{ack(), ack(), dead(), timeout()}, status: CompensationFailed, visit: 4,
			err: "timeout", failedStep: "check", compd: true, path: []string{"reserve", "charge"}, done: true},
		{name: "rule fail in compensation", acts: []action{ack(), dead(), ackWith(engine.Run{Fail: "no"})}, status: CompensationFailed,
			visit: 3, err: "no", failedStep: "charge", compd: true, path: []string{"reserve"}, done: true},
		{name: "compensating midway", acts: []action{ack(), ack(), dead()}, status: Compensating, step: "refund", visit: 4,
			err: "cap reached", failedStep: "check", compd: true, path: []string{"reserve", "charge"}},
		{name: "drop cancels with compensation", acts: []action{ack(), drop(), ack()}, status: Cancelled, visit: 3,
			path: []string{"reserve", "release"}, compd: true, done: true,
			history: []string{":started", "reserve:ack", "charge:drop", "release:ack", "release:cancelled"}},
		{name: "drop first step cancels", acts: []action{drop()}, status: Cancelled, visit: 1, done: true,
			history: []string{":started", "reserve:drop", "reserve:cancelled"}},
		{name: "drop in compensation goes on", acts: []action{ack(), ack(), dead(), drop(), ack()}, status: Failed, visit: 5,
			err: "cap reached", failedStep: "check", compd: true, path: []string{"reserve", "charge", "release"}, done: true},
		{name: "cancel compensates", acts: []action{ack(), cancelRun(), ack()}, status: Cancelled, visit: 3, compd: true, done: true,
			path: []string{"reserve", "release"}, history: []string{":started", "reserve:ack", "release:ack", "release:cancelled"}},
		{name: "cancel under stop", onFailure: "stop", acts: []action{ack(), cancelRun()}, status: Cancelled, visit: 2, done: true,
			path: []string{"reserve"}},
		{name: "timeout to on_timeout", acts: []action{ack(), ack(), ack(), timeout(), ack()}, status: Completed, visit: 5, done: true,
			path:    []string{"reserve", "charge", "check", "refund"},
			history: []string{":started", "reserve:ack", "charge:ack", "check:ack", "ship:timeout", "refund:ack", "refund:completed"}},
		{name: "timeout fails", acts: []action{ack(), timeout(), ack()}, status: Failed, visit: 3, err: "timeout",
			failedStep: "charge", compd: true, path: []string{"reserve", "release"}, done: true},
		{name: "output recorded", acts: []action{ackWith(engine.Run{Output: map[string]any{"id": 7}, HasOutput: true})},
			status: Running, step: "charge", visit: 2, path: []string{"reserve"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, ts := play(t, order(t, tc.onFailure), tc.acts...)
			if st.Status != tc.status || st.Step != tc.step || st.Visit != tc.visit {
				t.Errorf("status %s step %q visit %d, want %s %q %d (history %v)", st.Status, st.Step, st.Visit, tc.status, tc.step, tc.visit, outcomes(st))
			}
			if p := st.Path(); !slices.Equal(p, tc.path) {
				t.Errorf("path %v, want %v", p, tc.path)
			}
			if tc.history != nil && !slices.Equal(outcomes(st), tc.history) {
				t.Errorf("history %v, want %v", outcomes(st), tc.history)
			}
			if st.Error != tc.err || st.FailedStep != tc.failedStep || st.Compensated != tc.compd {
				t.Errorf("error %q failed_step %q compensated %v, want %q %q %v", st.Error, st.FailedStep, st.Compensated, tc.err, tc.failedStep, tc.compd)
			}
			if last := ts[len(ts)-1]; last.Done != tc.done || last.Done != !st.Status.Active() {
				t.Errorf("last transition done %v, want %v (status %s)", last.Done, tc.done, st.Status)
			}
			for i, tr := range ts[:len(ts)-1] {
				if tr.Done && !slices.ContainsFunc(tc.acts, func(a action) bool { return a.kind == "retry" }) {
					t.Errorf("transition %d is done before the last", i)
				}
			}
		})
	}
}

func TestOutputAndEvents(t *testing.T) {
	g := order(t, "")
	st, ts := play(t, g, ackWith(engine.Run{Output: map[string]any{"id": 7}, HasOutput: true}), ack(),
		ackWith(engine.Run{Output: nil, HasOutput: true}))
	if got := string(st.Steps["reserve"]); got != `{"id":7}` {
		t.Errorf("reserve output %s", got)
	}
	if got, ok := st.Steps["check"]; !ok || string(got) != "null" {
		t.Errorf("check output %q %v, want null", got, ok)
	}
	if _, ok := st.Steps["charge"]; ok {
		t.Error("charge recorded an output it did not set")
	}
	if tr := ts[1]; tr.Step != "reserve" || !tr.HasOutput || tr.Enter != "charge" || tr.Visit != 1 {
		t.Errorf("reserve's transition %+v", tr)
	}
	// charge has a timeout of 10m: registered from the moment it is entered.
	if tr := ts[1]; !tr.EnterDeadline.Equal(t0.Add(time.Second+10*time.Minute)) || tr.EnterDelay != 0 {
		t.Errorf("charge's deadline %v delay %v", tr.EnterDeadline, tr.EnterDelay)
	}
	if tr := ts[2]; !tr.EnterDeadline.IsZero() {
		t.Errorf("check has no timeout, got deadline %v", tr.EnterDeadline)
	}
	for _, e := range st.History[1:] {
		if e.Visit == 0 || e.At.IsZero() {
			t.Errorf("event %+v lacks visit or time", e)
		}
	}
	if st.History[1].Attempt != 1 {
		t.Errorf("attempt %d", st.History[1].Attempt)
	}
}

func TestDelayEntersLater(t *testing.T) {
	g := order(t, "")
	// refund has delay 1m: a timeout that sends ship there enters it after the delay.
	_, ts := play(t, g, ack(), ack(), ack(), timeout())
	if tr := ts[4]; tr.Enter != "refund" || tr.EnterDelay != time.Minute || !tr.EnterDeadline.IsZero() {
		t.Errorf("transition %+v", tr)
	}
	g2, err := NewGraph("w", "", 0, []StepDef{{Name: "a", Delay: time.Minute, Timeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	_, tr := g2.Start("r", nil, t0)
	if tr.EnterDelay != time.Minute || !tr.EnterDeadline.Equal(t0.Add(time.Hour+time.Minute)) {
		t.Errorf("start %+v", tr)
	}
}

func TestFailedAttemptAndReason(t *testing.T) {
	g := order(t, "")
	st, _ := play(t, g, dead())
	e := st.History[1]
	if e.Outcome != "dead_letter" || e.Attempt != 3 || e.Error != "cap reached" || e.Step != "reserve" {
		t.Errorf("event %+v", e)
	}
	if last := st.History[len(st.History)-1]; last.Outcome != EventFailed || last.Error != "cap reached" {
		t.Errorf("last event %+v", last)
	}
}

func TestNotApplicable(t *testing.T) {
	g := order(t, "")
	st, _ := play(t, g, ack(), ack(), ack(), ack()) // completed
	for name, tr := range map[string]Transition{
		"finish":  g.Finish(st, &engine.Run{}, 1, "ack", t0),
		"fail":    g.Fail(st, 1, "x", t0),
		"cancel":  g.Cancel(st, t0),
		"timeout": g.TimedOut(st, t0),
	} {
		before := *st
		if tr.Visit != NoVisit || st.Apply(tr) {
			t.Errorf("%s of a completed run applies: %+v", name, tr)
		}
		if st.Status != before.Status || len(st.History) != len(before.History) {
			t.Errorf("%s changed the run", name)
		}
	}
	if _, err := g.Retry(st, t0); !errors.Is(err, ErrNotRetryable) {
		t.Errorf("retry of completed: %v", err)
	}
	comp, _ := play(t, g, ack(), dead(), ack())
	if comp.Status != Failed || !comp.Compensated {
		t.Fatalf("setup: %s %v", comp.Status, comp.Compensated)
	}
	if _, err := g.Retry(comp, t0); !errors.Is(err, ErrNotRetryable) {
		t.Errorf("retry of compensated: %v", err)
	}
	running, _ := play(t, g, ack())
	if _, err := g.Retry(running, t0); !errors.Is(err, ErrNotRetryable) {
		t.Errorf("retry of running: %v", err)
	}
	// cancelling a compensating run leaves it compensating.
	c, _ := play(t, g, ack(), dead())
	if tr := g.Cancel(c, t0); tr.Visit != NoVisit {
		t.Errorf("cancel while compensating: %+v", tr)
	}
}

func TestStaleApply(t *testing.T) {
	g := order(t, "")
	st, _ := play(t, g, ack())
	tr := g.Finish(st, &engine.Run{}, 1, "ack", t0)
	dup := tr
	if !st.Apply(tr) || st.Apply(dup) {
		t.Fatal("a transition applied twice, or not once")
	}
	if !st.Stale(2) || st.Stale(3) {
		t.Errorf("stale: visit %d", st.Visit)
	}
	done, _ := play(t, g, drop())
	if !done.Stale(done.Visit) {
		t.Error("a message of a finished run's last visit is not stale")
	}
	other := *st
	other.ID = "r2"
	if other.Apply(g.Finish(st, &engine.Run{}, 1, "ack", t0)) {
		t.Error("a transition applied to another run")
	}
}

func TestNewGraphErrors(t *testing.T) {
	for _, tc := range []struct {
		steps     []StepDef
		onFailure string
		want      string
	}{
		{nil, "", "no steps"},
		{[]StepDef{{Name: "a"}, {Name: "a"}}, "", `step "a" declared twice`},
		{[]StepDef{{Name: "a", Next: "b"}}, "", `next names no step: "b"`},
		{[]StepDef{{Name: "a", Compensate: "b"}}, "", `compensate names no step`},
		{[]StepDef{{Name: "a", OnTimeout: "b"}}, "", `on_timeout names no step`},
		{[]StepDef{{Name: ""}}, "", "without a name"},
		{[]StepDef{{Name: "a"}}, "later", `on_failure "later"`},
	} {
		_, err := NewGraph("w", tc.onFailure, 0, tc.steps)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.steps, err, tc.want)
		}
	}
}
