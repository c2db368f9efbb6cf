package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/workflow"
)

// cmdTest runs the test blocks of the files against their pipelines' rules or Go handlers, with
// no connection to anything: a test's mock stands in for what an http or exec handler calls
// (SPEC §9).
func cmdTest(ctx context.Context, args []string, stdio Stdio) int {
	fs := newFlagSet("test", stdio)
	paths, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	cfg := load(paths, config.Options{}, stdio)
	if cfg == nil {
		return ExitConfig
	}
	passed, failed := 0, 0
	for _, t := range cfg.Tests {
		problems := runTest(ctx, cfg, t)
		if len(problems) == 0 {
			passed++
			fmt.Fprintf(stdio.Out, "PASS %s\n", t.Name)
			continue
		}
		failed++
		r := t.ExpectRange
		fmt.Fprintf(stdio.Out, "FAIL %s\n", t.Name)
		for _, p := range problems {
			fmt.Fprintf(stdio.Out, "  %s:%d:%d: %s\n", r.Filename, r.Start.Line, r.Start.Column, p)
		}
	}
	fmt.Fprintf(stdio.Out, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return ExitConfig
	}
	return ExitOK
}

// runTest returns what differed between the test's expectation and what the pipeline's rules or
// Go handler decided.
func runTest(ctx context.Context, cfg *config.Config, t *config.Test) []string {
	if t.Run != nil {
		return runWorkflowTest(ctx, cfg, t)
	}
	p := cfg.Pipeline(t.Pipeline)
	d := testDelivery(t.Message)
	var problems []string
	var res engine.Result
	var by string // who decided, for a wrong outcome
	if p.Handler != nil {
		var err error
		if res, err = runHandler(ctx, cfg, p, t.Mock, d); err != nil {
			return []string{err.Error()}
		}
		by = fmt.Sprintf("handler %q", p.Handler.Name)
		if t.Mock != nil {
			by += ", mock " + t.Mock.String()
		}
		if res.Err != nil {
			// A handler's error is how it asks for a retry with a reason (a timeout, a lost
			// connection): it fails the test only when the outcome is not the one expected.
			by += "; error: " + res.Err.Error()
		}
	} else {
		var rule string
		res, rule = p.Rules.Evaluate(d)
		if res.Err != nil {
			problems = append(problems, fmt.Sprintf("evaluation failed: %v", res.Err))
		}
		by = "no rule matched"
		if rule != "" {
			by = fmt.Sprintf("rule %q", rule)
		}
	}
	if !t.Expect.Matches(res.Outcome) {
		problems = append(problems, fmt.Sprintf("outcome: got %s (%s), want %s", res.Outcome, by, t.Expect.String()))
	}
	if t.Expect.HasEmits {
		problems = append(problems, compareEmits(res.Emits, t.Expect.Emits)...)
	}
	for _, k := range t.Expect.Keys {
		got, err := k.Key.FlowKey(testDelivery(t.Message))
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: the key expression failed: %v", k.Attr, err))
		case got != k.Want:
			problems = append(problems, fmt.Sprintf("%s: got %q, want %q", k.Attr, got, k.Want))
		}
	}
	return problems
}

// testDelivery is a test's message as a source would deliver it.
func testDelivery(m config.TestMessage) *engine.Delivery {
	headers := make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		headers[k] = v
	}
	attempt := max(m.Attempt, 1)
	if attempt > 1 {
		headers[engine.HeaderRetryCount] = strconv.Itoa(attempt - 1)
	}
	return &engine.Delivery{
		Message: engine.Message{Key: m.Key, Headers: headers, Payload: m.Payload},
		Attempt: attempt,
	}
}

// runHandler builds the pipeline's Go handler as `run` does, with the mock (if any) in place of
// the server or the process it calls, hands it the delivery and closes it. It does not start the
// handler: a test connects nowhere. A panic in the handler is an error, as is a failed build.
func runHandler(ctx context.Context, cfg *config.Config, p *config.Pipeline, mock handlers.Mock, d *engine.Delivery) (res engine.Result, err error) {
	redisName := ""
	if p.Source != nil {
		redisName = p.Source.Redis
	}
	return provisionAndHandle(ctx, cfg, p, redisName, mock, d)
}

// provisionAndHandle is runHandler with the redis block the handler gets (a workflow step's is
// its workflow's).
func provisionAndHandle(ctx context.Context, cfg *config.Config, p *config.Pipeline, redisName string, mock handlers.Mock, d *engine.Delivery) (res engine.Result, err error) {
	hc := p.Handler
	if redisName == "" && len(cfg.Redis) == 1 {
		redisName = cfg.Redis[0].Name
	}
	h, err := hc.Config.Provision(ctx, handlers.Env{Pipeline: p.Name, Logger: zerolog.Nop(), Redis: redisName, Mock: mock})
	if err != nil {
		return res, fmt.Errorf("handler %q: provision: %v", hc.Name, err)
	}
	defer func() {
		if cerr := h.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("handler %q: close: %v", hc.Name, cerr)
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler %q panicked: %v", hc.Name, r)
		}
	}()
	return h.Handle(ctx, d), nil
}

func compareEmits(got []engine.Emit, want []config.TestEmit) []string {
	var problems []string
	if len(got) != len(want) {
		problems = append(problems, fmt.Sprintf("emits: got %d, want %d", len(got), len(want)))
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		g, w := got[i], want[i]
		if g.Target.Kind != w.Kind || g.Message.Key != w.Key {
			problems = append(problems, fmt.Sprintf("emit %d: got %s %q, want %s %q", i+1, g.Target.Kind, g.Message.Key, w.Kind, w.Key))
		}
		if w.HasPayload && !samePayload(g.Message.Payload, []byte(w.Payload)) {
			problems = append(problems, fmt.Sprintf("emit %d payload: got %s, want %s", i+1, g.Message.Payload, w.Payload))
		}
	}
	return problems
}

// samePayload compares JSON payloads as JSON values, anything else byte for byte.
func samePayload(got, want []byte) bool {
	var g, w any
	if json.Unmarshal(got, &g) == nil && json.Unmarshal(want, &w) == nil {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		return bytes.Equal(gb, wb)
	}
	return strings.TrimSpace(string(got)) == strings.TrimSpace(string(want))
}

// maxTestCalls bounds a workflow test's handler calls: a run that loops (a rule's next back to
// an earlier step, a rule that always retries without a cap) fails the test instead of hanging.
const maxTestCalls = 1000

// testStart is the time a workflow test's run starts at; the test's clock moves only by the
// delays it takes (retry_after, a step's delay), so a step's timeout fires when they add up.
var testStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// workflowRun is one workflow test's run, offline: a MemStore, the graph's transitions, and the
// steps' handlers (rules, handlers with the test's mocks, Go handlers as compiled).
type workflowRun struct {
	cfg   *config.Config
	w     *config.Workflow
	g     *workflow.Graph
	test  *config.WorkflowTest
	store *workflow.MemStore
	now   time.Time
	calls map[string]int // handler calls per step so far: the next call takes mock calls[step]
	total int
}

// runWorkflowTest runs a test of a workflow and returns what differed from its expect block.
func runWorkflowTest(ctx context.Context, cfg *config.Config, t *config.Test) []string {
	w := cfg.Workflow(t.Workflow)
	if w == nil {
		return []string{fmt.Sprintf("no workflow %q", t.Workflow)}
	}
	g, err := testGraph(w)
	if err != nil {
		return []string{err.Error()}
	}
	r := &workflowRun{cfg: cfg, w: w, g: g, test: t.Run, store: workflow.NewMemStore(), now: testStart, calls: map[string]int{}}
	st, err := r.run(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	return compareRun(st, t.Run.Expect)
}

// testGraph is the workflow's graph, as `run` builds it.
func testGraph(w *config.Workflow) (*workflow.Graph, error) {
	defs := make([]workflow.StepDef, 0, len(w.Steps))
	for _, s := range w.Steps {
		defs = append(defs, workflow.StepDef{Name: s.Name, Next: s.Next, Compensate: s.Compensate,
			OnTimeout: s.OnTimeout, Timeout: s.Timeout, Delay: s.Delay, ForEach: s.ForEach != nil,
			Wait: s.Wait != nil, KeepFor: s.KeepFor()})
	}
	return workflow.NewGraph(w.Name, w.OnFailure, w.Retention, defs)
}

// run starts the run and delivers each step it enters until it ends.
func (r *workflowRun) run(ctx context.Context) (*workflow.State, error) {
	input := json.RawMessage(r.test.Input)
	st, tr := r.g.Start("test", input, r.now)
	if _, err := r.store.Create(ctx, st, tr); err != nil {
		return nil, err
	}
	for {
		entries := r.store.Entered()
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			if err := r.visit(ctx, e); err != nil {
				return nil, err
			}
		}
	}
	st, err := r.store.Get(ctx, "test")
	if err != nil {
		return nil, err
	}
	if st.Status.Active() {
		return nil, fmt.Errorf("the run stopped %s at step %q with nothing to deliver", st.Status, st.Step)
	}
	return st, nil
}

// visit delivers one entered step, attempt after attempt, until its visit settles: finished,
// failed, or timed out.
func (r *workflowRun) visit(ctx context.Context, e workflow.Entry) error {
	r.now = r.now.Add(e.Transition.EnterDelay)
	deadline := e.Transition.EnterDeadline
	step := r.w.Step(e.Step)
	if step == nil {
		return fmt.Errorf("the run entered step %q, which workflow %q does not have", e.Step, r.w.Name)
	}
	p := step.Pipeline
	policy := engine.Policy{MaxAttempts: p.MaxAttempts, DeadLetter: r.w.DeadLetter, Caps: engine.Capabilities{Ack: true, DurableDelay: true}}
	if policy.DeadLetter == "" {
		policy.DeadLetter = "dead"
	}
	if step.ForEach != nil {
		return r.visitForEach(ctx, e, step, policy, deadline)
	}
	for attempt := 1; ; attempt++ {
		st, err := r.store.Get(ctx, e.Run)
		if err != nil {
			return err
		}
		if st.Stale(e.Visit) {
			return nil
		}
		if !deadline.IsZero() && !r.now.Before(deadline) {
			return r.apply(ctx, r.g.TimedOut(st, r.now))
		}
		if r.total++; r.total > maxTestCalls {
			return fmt.Errorf("the run did not end within %d handler calls (at step %q)", maxTestCalls, e.Step)
		}
		if step.Wait != nil {
			return r.waitVisit(ctx, st, e, deadline)
		}
		d := r.delivery(st, e, attempt)
		res, err := r.call(ctx, step, d)
		if err != nil {
			return err
		}
		if res.Err != nil && (res.Outcome.Kind == engine.KindAck || res.Outcome.Kind == engine.KindDrop) {
			res.Outcome = engine.Retry()
		}
		dec := policy.Decide(d, res.Outcome, res.Err, r.now)
		visit := d.Run.State.(*workflow.Visit)
		switch dec.Settlement.Action {
		case engine.ActAck:
			if visit.Label == "" {
				return fmt.Errorf("step %q: call %d settled as %s, which a workflow step cannot", e.Step, r.calls[e.Step], dec.Label)
			}
			return r.apply(ctx, r.g.Finish(st, d.Run, attempt, visit.Label, r.now))
		case engine.ActDeadLetter:
			return r.apply(ctx, r.g.Fail(st, attempt, dec.Note, r.now))
		case engine.ActDelay:
			r.now = dec.Settlement.Due
		}
	}
}

func (r *workflowRun) apply(ctx context.Context, t workflow.Transition) error {
	if _, err := r.store.Apply(ctx, t); err != nil {
		return err
	}
	return nil
}

// delivery is the step message of entry e as a step source delivers it, with the run's view.
func (r *workflowRun) delivery(st *workflow.State, e workflow.Entry, attempt int) *engine.Delivery {
	headers := map[string]string{}
	if attempt > 1 {
		headers[engine.HeaderRetryCount] = strconv.Itoa(attempt - 1)
	}
	steps := make(map[string]any, len(st.Steps))
	for k, v := range st.Steps {
		steps[k] = decodeJSON(v)
	}
	return &engine.Delivery{
		Message: engine.Message{Key: "flowrun:{" + r.w.Name + "}:s:" + e.Step, Headers: headers},
		Attempt: attempt,
		Run: &engine.Run{ID: st.ID, Workflow: st.Workflow, Step: e.Step, Visit: e.Visit, StartedAt: st.StartedAt,
			Input: decodeJSON(st.Input), Steps: steps, State: &workflow.Visit{State: st, Stale: st.Stale(e.Visit)}},
	}
}

// decodeJSON is b's JSON value, or b as a string when it is not JSON.
func decodeJSON(b []byte) any {
	var v any
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	return v
}

// call runs one call of a step's handler through the step handler, with the step's next mock.
func (r *workflowRun) call(ctx context.Context, s *config.Step, d *engine.Delivery) (engine.Result, error) {
	n := r.calls[s.Name]
	r.calls[s.Name]++
	var mock *config.StepMock
	if ms := r.test.Mocks[s.Name]; n < len(ms) {
		mock = ms[n]
	}
	p := s.Pipeline
	var failure error
	inner := engine.HandlerFunc(func(ctx context.Context, d *engine.Delivery) engine.Result {
		var res engine.Result
		switch {
		case mock != nil && mock.Mock == nil && p.Handler != nil:
			res = engine.Result{Outcome: engine.Ack()} // output and outcome stand in for the handler
		case p.Handler == nil:
			res = p.Rules.Handle(ctx, d)
		case mock == nil && p.Handler.Plugin.DecodeMock != nil:
			failure = fmt.Errorf("step %q: call %d of its %s handler has no mock (the step has %d)", s.Name, n+1, p.Handler.Name, len(r.test.Mocks[s.Name]))
			return engine.Result{Outcome: engine.Retry(), Err: failure}
		default:
			var hm handlers.Mock
			if mock != nil {
				hm = mock.Mock
			}
			var err error
			if res, err = provisionAndHandle(ctx, r.cfg, p, r.w.Redis, hm, d); err != nil {
				failure = fmt.Errorf("step %q: %w", s.Name, err)
				return engine.Result{Outcome: engine.Retry(), Err: failure}
			}
		}
		if mock != nil {
			applyMock(mock, d, &res)
		}
		return res
	})
	res := stepHandler(r.g, s, inner).Handle(ctx, d)
	return res, failure
}

// applyMock makes a step mock's output and outcome the call's.
func applyMock(m *config.StepMock, d *engine.Delivery, res *engine.Result) {
	if m.Output != nil {
		d.Run.Output, d.Run.HasOutput = decodeJSON(m.Output), true
	}
	if o, ok := m.MockOutcome(); ok {
		if o.Kind == engine.KindDeadLetter && o.Reason == "" {
			o.Reason = "the mock's outcome" // what the run's error says it failed of
		}
		res.Outcome, res.Err = o, nil
	}
}

// compareRun returns what differs between how the run ended and the test's expect block.
func compareRun(st *workflow.State, e config.WorkflowExpect) []string {
	var problems []string
	if e.Status != "" && string(st.Status) != e.Status {
		got := string(st.Status)
		if st.Error != "" {
			got += fmt.Sprintf(" (%s)", st.Error)
		}
		problems = append(problems, fmt.Sprintf("status: got %s, want %s", got, e.Status))
	}
	if path := st.Path(); e.HasPath && !slices.Equal(path, e.Path) {
		problems = append(problems, fmt.Sprintf("path: got %s, want %s", quotedList(path), quotedList(e.Path)))
	}
	for _, name := range slices.Sorted(maps.Keys(e.Output)) {
		want := e.Output[name]
		got, ok := st.Steps[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("output of step %q: none recorded, want %s", name, want))
		case !samePayload(got, want):
			problems = append(problems, fmt.Sprintf("output of step %q: got %s, want %s", name, got, want))
		}
	}
	return problems
}

func quotedList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
