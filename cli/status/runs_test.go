package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/redisrun"
	"github.com/flowrun/flowrun/workflow"
)

// The runs API against a real redis-server and the real run store: runs made by the store's
// own transitions, read, cancelled and retried through the handlers.

const hostileRun = `<img src=x onerror="window.pwned='run'">`

type runsFixture struct {
	*fixture
	store *redisrun.Store
	g     *workflow.Graph
	ctx   context.Context
	t0    time.Time
}

func newRunsFixture(t *testing.T, token string) *runsFixture {
	t.Helper()
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	g, err := workflow.NewGraph("order", "compensate", time.Hour, []workflow.StepDef{
		{Name: "check", Next: "approve"},
		{Name: "approve", Timeout: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &runsFixture{fixture: &fixture{t: t, rdb: rdb}, store: redisrun.NewStore(rs.Client(t), g), g: g,
		ctx: context.Background(), t0: time.Now().Add(-time.Minute).Truncate(time.Millisecond)}
	f.srv = httptest.NewServer(Handler(Options{
		Pipelines: func() []*config.Pipeline { return nil },
		Engine: func() []engine.PipelineStatus {
			return []engine.PipelineStatus{{Name: "order/check", State: engine.StateRunning, Totals: map[string]int64{"ack": 3}}}
		},
		Stats:   func(string) (transports.Stats, time.Time, bool) { return transports.Stats{}, time.Time{}, false },
		Refresh: func() {},
		Env:     func(string) *transports.Env { return nil },
		Graph:   func() Graph { return Graph{} },
		Workflows: func() []Workflow {
			return []Workflow{{Name: "order", Steps: []string{"check", "approve"}, Runs: f.store, Pipelines: []Pipeline{
				{Name: "order", Kind: "stream", Key: "orders"},
				{Name: "order/check", Kind: "workflow", Key: "flowrun:{order}:s:check"},
				{Name: "order/approve", Kind: "workflow", Key: "flowrun:{order}:s:approve"},
			}}}
		},
		AdminToken:  token,
		SampleEvery: time.Hour, // counted once, unless an action makes the page count again
		Logger:      zerolog.Nop(),
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// start creates run id, n seconds after t0, at its first step.
func (f *runsFixture) start(id string, n int, input string) *workflow.State {
	f.t.Helper()
	st, tr := f.g.Start(id, json.RawMessage(input), f.t0.Add(time.Duration(n)*time.Second))
	if ok, err := f.store.Create(f.ctx, st, tr); err != nil || !ok {
		f.t.Fatalf("create %s: %v %v", id, ok, err)
	}
	return f.read(id)
}

func (f *runsFixture) read(id string) *workflow.State {
	f.t.Helper()
	st, err := f.store.Get(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// ack finishes the run's current step d after its last event, with output.
func (f *runsFixture) ack(id string, d time.Duration, output any) {
	f.t.Helper()
	st := f.read(id)
	at := st.History[len(st.History)-1].At.Add(d)
	tr := f.g.Finish(st, &engine.Run{Output: output, HasOutput: true}, 1, "ack", at)
	if ok, err := f.store.Apply(f.ctx, tr); err != nil || !ok {
		f.t.Fatalf("ack %s: %v %v", id, ok, err)
	}
}

func (f *runsFixture) fail(id string, reason string) {
	f.t.Helper()
	st := f.read(id)
	tr := f.g.Fail(st, 3, reason, st.StartedAt.Add(2*time.Second))
	if ok, err := f.store.Apply(f.ctx, tr); err != nil || !ok {
		f.t.Fatalf("fail %s: %v %v", id, ok, err)
	}
}

func (f *runsFixture) status(id string) string {
	f.t.Helper()
	return f.rdb.HGet(f.ctx, "flowrun:{order}:run:"+id, "status").Val()
}

// seed: r-wait at approve (running, with a timeout), r-done completed, r-fail failed at check,
// and a hostile id at check.
func (f *runsFixture) seed() {
	f.start("r-wait", 1, `{"amount":5}`)
	f.ack("r-wait", 1500*time.Millisecond, map[string]any{"ok": true})
	f.start("r-done", 2, `{"amount":6}`)
	f.ack("r-done", time.Second, "checked")
	f.ack("r-done", 2*time.Second, map[string]any{"approved": "<b>yes</b>"})
	f.start("r-fail", 3, `{"amount":-1}`)
	f.fail("r-fail", `http 500: <script>window.pwned='error'</script>`)
	f.start(hostileRun, 4, `{"note":"</pre><script>window.pwned='input'</script>"}`)
}

func TestAPIWorkflowsCounts(t *testing.T) {
	f := newRunsFixture(t, "")
	f.seed()
	var out workflowsJSON
	if code := f.get("/api/workflows", &out); code != 200 || len(out.Workflows) != 1 {
		t.Fatalf("GET /api/workflows: %d %+v", code, out)
	}
	w := out.Workflows[0]
	if w.Name != "order" || strings.Join(w.Steps, " ") != "check approve" || w.CountedAt == nil || w.Error != "" {
		t.Errorf("workflow %+v", w)
	}
	want := map[string]int64{"running": 2, "waiting": 0, "compensating": 0, "completed": 1, "failed": 1, "compensation_failed": 0, "cancelled": 0}
	if fmt.Sprint(w.Runs) != fmt.Sprint(want) {
		t.Errorf("runs per status %v, want %v", w.Runs, want)
	}
	if fmt.Sprint(w.Active) != fmt.Sprint(map[string]int64{"check": 1, "approve": 1}) {
		t.Errorf("active per step %v", w.Active)
	}
	if len(out.Statuses) != 7 || out.Admin {
		t.Errorf("statuses %v admin %v", out.Statuses, out.Admin)
	}
	// counted once per period: a run started since shows in the active counts (read at each
	// request) but not yet in the counts per status
	f.start("r-new", 5, `{}`)
	f.get("/api/workflows", &out)
	if w := out.Workflows[0]; w.Runs["running"] != 2 || w.Active["check"] != 2 {
		t.Errorf("after a new run: per status %v (want the counts kept), active %v", w.Runs, w.Active)
	}
}

func TestAPIRunsListAndShow(t *testing.T) {
	f := newRunsFixture(t, "")
	f.seed()
	var l runListJSON
	if code := f.get("/api/workflows/order/runs", &l); code != 200 {
		t.Fatalf("list: %d", code)
	}
	var ids []string
	for _, r := range l.Runs {
		ids = append(ids, r.ID+"="+r.Status)
	}
	if got := strings.Join(ids, " "); got != hostileRun+"=running r-fail=failed r-done=completed r-wait=running" || l.More {
		t.Errorf("runs, newest first: %s (more %v)", got, l.More)
	}
	f.get("/api/workflows/order/runs?status=running&limit=1", &l)
	if len(l.Runs) != 1 || l.Runs[0].ID != hostileRun || !l.More || l.Runs[0].Step != "check" {
		t.Errorf("running, limit 1: %+v", l)
	}
	for path, want := range map[string]int{
		"/api/workflows/order/runs?status=lost": 400, "/api/workflows/order/runs?limit=0": 400,
		"/api/workflows/nope/runs": 404, "/api/workflows/order/run": 400,
		"/api/workflows/order/run?id=nope": 404, "/api/workflows/nope/run?id=r-wait": 404,
	} {
		if code := f.get(path, nil); code != want {
			t.Errorf("GET %s: %d, want %d", path, code, want)
		}
	}

	var r runJSON
	if code := f.get("/api/workflows/order/run?id=r-wait", &r); code != 200 {
		t.Fatalf("show: %d", code)
	}
	if r.Status != "running" || r.Step != "approve" || r.Visit != 2 || !r.Cancellable || r.Retryable || r.TimesOutAt == nil || r.WaitingIn != "" {
		t.Errorf("run %+v", r)
	}
	entered := f.t0.Add(time.Second + 1500*time.Millisecond)
	if !r.TimesOutAt.Equal(entered.Add(time.Hour)) {
		t.Errorf("times out at %v, want %v (an hour after it entered approve)", r.TimesOutAt, entered.Add(time.Hour))
	}
	if deadline := f.rdb.ZScore(f.ctx, "flowrun:{order}:timeouts", "r-wait\n2").Val(); int64(deadline) != entered.Add(time.Hour).UnixMilli() {
		t.Errorf("the timeouts set holds %v", deadline)
	}
	if len(r.History) != 2 || r.History[0].Outcome != "started" || r.History[0].SinceMS != nil ||
		r.History[1].Outcome != "ack" || r.History[1].Step != "check" || *r.History[1].SinceMS != 1500 {
		t.Errorf("history %+v", r.History)
	}
	if len(r.Outputs) != 1 || r.Outputs[0].Step != "check" || r.Outputs[0].Output != "{\n  \"ok\": true\n}" || r.Input != "{\n  \"amount\": 5\n}" {
		t.Errorf("input %q outputs %+v", r.Input, r.Outputs)
	}
	if r.InStepMS == nil || *r.InStepMS < 55_000 {
		t.Errorf("in step for %v, want about a minute", r.InStepMS)
	}

	f.get("/api/workflows/order/run?id=r-done", &r)
	if r.Status != "completed" || r.Step != "" || r.TimesOutAt != nil || r.Cancellable || *r.TookMS != 3000 ||
		len(r.Outputs) != 2 || r.Outputs[1].Step != "approve" || r.History[len(r.History)-1].Outcome != "completed" {
		t.Errorf("completed run %+v", r)
	}
	f.get("/api/workflows/order/run?id=r-fail", &r)
	if r.Status != "failed" || !r.Retryable || r.FailedStep != "check" || !strings.Contains(r.Error, "<script>") ||
		r.History[1].Outcome != "dead_letter" || r.History[1].Attempt != 3 {
		t.Errorf("failed run %+v", r)
	}
	// a hostile id is found by its characters; the JSON carries them as they are
	resp, err := http.Get(f.srv.URL + "/api/workflows/order/run?id=" + urlq(hostileRun))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(string(b), `"id":"<img src=x onerror=\"window.pwned='run'\">"`) {
		t.Errorf("hostile run: %d %v\n%s", resp.StatusCode, resp.Header, b)
	}
}

func TestAPIRunActionsRefused(t *testing.T) {
	body := `{"id": "r-wait"}`
	t.Run("read-only", func(t *testing.T) {
		f := newRunsFixture(t, "")
		f.seed()
		for _, action := range []string{"cancel", "retry"} {
			code, out := f.post("/api/workflows/order/runs/"+action, "any", "c", "", body)
			if code != 403 || !strings.Contains(fmt.Sprint(out["error"]), "runs cannot be cancelled or retried here") {
				t.Errorf("%s on a read-only page: %d %v", action, code, out)
			}
		}
		if f.status("r-wait") != "running" || f.status("r-fail") != "failed" {
			t.Errorf("a read-only page changed runs")
		}
	})
	t.Run("token", func(t *testing.T) {
		f := newRunsFixture(t, "s3cret")
		f.seed()
		for _, c := range []struct {
			name, token, csrf, origin string
			want                      int
		}{
			{"no token", "", "c", "", 401},
			{"wrong token", "nope", "c", "", 401},
			{"no csrf", "s3cret", "", "", 403},
			{"other origin", "s3cret", "c", "http://evil.example", 403},
		} {
			for _, action := range []string{"cancel", "retry"} {
				code, out := f.post("/api/workflows/order/runs/"+action, c.token, c.csrf, c.origin, body)
				if code != c.want {
					t.Errorf("%s: %s %d %v, want %d", c.name, action, code, out, c.want)
				}
			}
		}
		// a browser's cross-site request, even with the token and the cookie
		req, _ := http.NewRequest("POST", f.srv.URL+"/api/workflows/order/runs/cancel", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer s3cret")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set(csrfHeader, "c")
		req.AddCookie(&http.Cookie{Name: csrfCookie, Value: "c"})
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
			t.Errorf("cross-site cancel: %v %v", resp, err)
		}
		// no GET changes anything
		for _, path := range []string{"/api/workflows/order/runs/cancel?id=r-wait", "/api/workflows/order/runs/retry?id=r-fail"} {
			if code := f.get(path, nil); code != http.StatusMethodNotAllowed {
				t.Errorf("GET %s: %d, want 405", path, code)
			}
		}
		if f.status("r-wait") != "running" || f.status("r-fail") != "failed" {
			t.Errorf("refused actions changed runs: %s %s", f.status("r-wait"), f.status("r-fail"))
		}
	})
}

func TestAPIRunCancelAndRetry(t *testing.T) {
	f := newRunsFixture(t, "s3cret")
	f.seed()
	origin := f.srv.URL
	post := func(action, id string, want int) map[string]any {
		t.Helper()
		b, _ := json.Marshal(map[string]string{"id": id})
		code, out := f.post("/api/workflows/order/runs/"+action, "s3cret", "c", origin, string(b))
		if code != want {
			t.Fatalf("%s %s: %d %v, want %d", action, id, code, out, want)
		}
		return out
	}
	var before workflowsJSON
	f.get("/api/workflows", &before)

	out := post("cancel", "r-wait", 200)
	if out["message"] != "cancelled run r-wait" || f.status("r-wait") != "cancelled" {
		t.Errorf("cancel: %v, status %s", out, f.status("r-wait"))
	}
	if n := f.rdb.ZCard(f.ctx, "flowrun:{order}:timeouts").Val(); n != 0 {
		t.Errorf("the cancelled run's timeout is left: %d", n)
	}
	post("cancel", "r-wait", 409)
	post("cancel", "r-done", 409)
	post("cancel", "nope", 404)
	out = post("cancel", hostileRun, 200)
	if f.status(hostileRun) != "cancelled" {
		t.Errorf("hostile run: %v %s", out, f.status(hostileRun))
	}

	out = post("retry", "r-fail", 200)
	if out["message"] != "retrying run r-fail at step check" || f.status("r-fail") != "running" {
		t.Errorf("retry: %v, status %s", out, f.status("r-fail"))
	}
	post("retry", "r-fail", 409)
	post("retry", "r-done", 409)
	if code, _ := f.post("/api/workflows/order/runs/retry", "s3cret", "c", origin, `{}`); code != 400 {
		t.Errorf("retry without an id: %d", code)
	}

	// an action counts the runs again at the next request
	var after workflowsJSON
	f.get("/api/workflows", &after)
	if got := after.Workflows[0].Runs; got["cancelled"] != 2 || got["running"] != 1 || got["failed"] != 0 || !after.Workflows[0].CountedAt.After(*before.Workflows[0].CountedAt) {
		t.Errorf("counts after the actions: %v", got)
	}
	var r runJSON
	f.get("/api/workflows/order/run?id=r-wait", &r)
	if r.History[len(r.History)-1].Outcome != "cancelled" || r.Cancellable {
		t.Errorf("cancelled run %+v", r)
	}
}

func TestRunCountsOnceAtATime(t *testing.T) {
	slow := &slowRuns{release: make(chan struct{})}
	var c runCounts
	wf := Workflow{Name: "w", Runs: slow}
	soon := func() time.Time { return time.Now().Add(50 * time.Millisecond) }
	// a count that takes long: the request answers without counts, the count goes on
	counts, at, err := c.get(wf, time.Hour, soon())
	if counts != nil || !at.IsZero() || err != nil {
		t.Errorf("while counting: %v %v %v", counts, at, err)
	}
	if counts, _, _ := c.get(wf, time.Hour, soon()); counts != nil || slow.calls.Load() != 1 {
		t.Errorf("a second request while counting: %v, %d counts", counts, slow.calls.Load())
	}
	close(slow.release)
	for range 5 {
		counts, at, err := c.get(wf, time.Hour, time.Now().Add(time.Second))
		if err != nil || counts["running"] != 1 || at.IsZero() {
			t.Fatalf("counts %v at %v: %v", counts, at, err)
		}
	}
	if n := slow.calls.Load(); n != 1 {
		t.Errorf("counted %d times within the period, want once", n)
	}
	c.forget("w")
	c.get(wf, time.Hour, time.Now().Add(time.Second))
	if n := slow.calls.Load(); n != 2 {
		t.Errorf("after forget: counted %d times, want 2", n)
	}
	// a failed count keeps the last counts, says why, and is not tried again within the period
	slow.fail.Store(true)
	c.forget("w")
	counts, _, err = c.get(wf, time.Hour, time.Now().Add(time.Second))
	if err == nil || counts["running"] != 1 {
		t.Errorf("a failed count: %v %v", counts, err)
	}
	c.get(wf, time.Hour, time.Now().Add(time.Second))
	if n := slow.calls.Load(); n != 3 {
		t.Errorf("after a failure: counted %d times, want 3", n)
	}
}

// slowRuns counts how often Counts is called; each call waits for release; with fail set it
// fails.
type slowRuns struct {
	Runs
	calls   atomic.Int64
	fail    atomic.Bool
	release chan struct{}
}

func (s *slowRuns) Counts(context.Context) (map[string]int64, map[workflow.Status]int64, error) {
	s.calls.Add(1)
	<-s.release
	if s.fail.Load() {
		return nil, nil, fmt.Errorf("redis down")
	}
	return nil, map[workflow.Status]int64{workflow.Running: 1}, nil
}

func TestPageLoadsRunsScript(t *testing.T) {
	f := newRunsFixture(t, "")
	resp, err := http.Get(f.srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `<script src="assets/runs.js" defer></script>`) || !strings.Contains(string(b), `id="runs-section"`) {
		t.Errorf("page:\n%s", b)
	}
	if code := f.get("/assets/runs.js", nil); code != 200 {
		t.Errorf("runs.js: %d", code)
	}
}

// A waiting run names the step it waits in; a finished one has no step and no time in it.
func TestRunOfWaiting(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	st := &workflow.State{ID: "w1", Workflow: "order", Status: workflow.Waiting, Step: "await-payment", Visit: 2,
		StartedAt: t0, UpdatedAt: t0.Add(time.Second), History: []workflow.Event{
			{Outcome: "started", At: t0}, {Step: "reserve", Visit: 1, Attempt: 1, Outcome: "ack", At: t0.Add(time.Second)}}}
	r := runOf(st, t0.Add(time.Minute))
	if r.WaitingIn != "await-payment" || !r.Cancellable || *r.InStepMS != 59_000 || *r.TookMS != 60_000 || *r.History[1].SinceMS != 1000 {
		t.Errorf("waiting run %+v", r)
	}
	st.Status, st.Step = workflow.Completed, ""
	r = runOf(st, t0.Add(time.Hour))
	if r.WaitingIn != "" || r.InStepMS != nil || *r.TookMS != 1000 || r.Cancellable {
		t.Errorf("completed run %+v", r)
	}
}

func TestUnescapeHTML(t *testing.T) {
	for in, want := range map[string]string{
		`{"a": "\u003cb\u003e \u0026"}`: `{"a": "<b> &"}`,
		`"\\u003c"`:                     `"\\u003c"`, // an escaped backslash, then text
		`"\\\u003c"`:                    `"\\<"`,
		`"\u00e9"`:                      `"\u00e9"`,
	} {
		if got := unescapeHTML(in); got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
		var a, b any
		if json.Unmarshal([]byte(in), &a) != nil || json.Unmarshal([]byte(want), &b) != nil || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("%s and %s are not the same JSON", in, want)
		}
	}
}

// A workflow's engine pipelines have cards, after the files' pipelines (none here).
func TestAPIStatusWorkflowPipelines(t *testing.T) {
	f := newRunsFixture(t, "")
	var st statusJSON
	if code := f.get("/api/status", &st); code != 200 || len(st.Pipelines) != 3 {
		t.Fatalf("GET /api/status: %d %+v", code, st.Pipelines)
	}
	start, check := st.Pipelines[0], st.Pipelines[1]
	if start.Name != "order" || start.State != engine.StateStopped || start.Source.Kind != "stream" || start.Source.Key != "orders" || start.DeadLetterAccess {
		t.Errorf("the start's card %+v", start)
	}
	if check.Name != "order/check" || check.State != engine.StateRunning || check.Totals["ack"] != 3 || check.Source.Kind != "workflow" || check.Source.Key != "flowrun:{order}:s:check" {
		t.Errorf("a step's card %+v", check)
	}
}
