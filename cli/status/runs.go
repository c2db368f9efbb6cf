package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flowrun/flowrun/transports/redisrun"
	"github.com/flowrun/flowrun/workflow"
)

// The runs of the workflows this process runs (SPEC §16, the status page sentences): per
// workflow the runs per status and the active runs per step, a run found by id or listed by
// status, its history as a timeline, and cancel and retry behind the same checks as a redrive.

// Workflow is one workflow this process runs, as the page shows it.
type Workflow struct {
	Name  string
	Steps []string // declaration order
	Runs  Runs
	// Pipelines are the workflow's engine pipelines, each shown with a card as the files'
	// pipelines are: the start "WF", each step's "WF/STEP", each wait's events "WF.STEP".
	Pipelines []Pipeline
}

// Runs is where a workflow's runs are kept (transports/redisrun.Store).
type Runs interface {
	Active(ctx context.Context) (map[string]int64, error)
	Counts(ctx context.Context) (map[string]int64, map[workflow.Status]int64, error)
	List(ctx context.Context, status workflow.Status, limit int) ([]*workflow.State, error)
	Get(ctx context.Context, id string) (*workflow.State, error)
	Deadline(ctx context.Context, id string, visit int) (time.Time, bool, error)
	Cancel(ctx context.Context, id string) error
	Retry(ctx context.Context, id string) error
}

// Limits of the runs API. Counting the runs per status walks every run kept, so it runs at
// most once per countsEvery per workflow whoever asks, for at most countTimeout, and a request
// waits countWait at most for it; a list by status walks until it has its page, one at a time
// per client address, for at most runsTimeout.
const (
	defaultRuns  = 20
	maxRuns      = 200
	runsTimeout  = 10 * time.Second
	minCounts    = 5 * time.Second
	countWait    = 2 * time.Second
	countTimeout = time.Minute
)

func (s *server) runRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/workflows", s.workflows)
	mux.HandleFunc("GET /api/workflows/{name}/runs", s.runList)
	mux.HandleFunc("GET /api/workflows/{name}/run", s.runShow)
	mux.HandleFunc("POST /api/workflows/{name}/runs/cancel", s.guard(runsReadOnly, s.runCancel))
	mux.HandleFunc("POST /api/workflows/{name}/runs/retry", s.guard(runsReadOnly, s.runRetry))
}

const runsReadOnly = "runs cannot be cancelled or retried here"

// workflowJSON is one workflow of GET /api/workflows.
type workflowJSON struct {
	Name      string           `json:"name"`
	Steps     []string         `json:"steps"`
	Runs      map[string]int64 `json:"runs"`       // by status, every status listed
	CountedAt *time.Time       `json:"counted_at"` // when Runs was counted (null: not yet)
	Active    map[string]int64 `json:"active"`     // active runs by step, every step listed
	Error     string           `json:"error,omitempty"`
}

type workflowsJSON struct {
	Admin     bool           `json:"admin"`
	Statuses  []string       `json:"statuses"`
	Workflows []workflowJSON `json:"workflows"`
}

func (s *server) workflowList() []Workflow {
	if s.o.Workflows == nil {
		return nil
	}
	ws := s.o.Workflows()
	sort.Slice(ws, func(i, j int) bool { return ws[i].Name < ws[j].Name })
	return ws
}

func (s *server) workflows(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), runsTimeout)
	defer cancel()
	waitUntil := time.Now().Add(countWait)
	out := workflowsJSON{Admin: s.o.AdminToken != "", Statuses: []string{}, Workflows: []workflowJSON{}}
	for _, st := range workflow.Statuses {
		out.Statuses = append(out.Statuses, string(st))
	}
	for _, wf := range s.workflowList() {
		j := workflowJSON{Name: wf.Name, Steps: nonNilList(wf.Steps), Runs: map[string]int64{}, Active: map[string]int64{}}
		for _, st := range workflow.Statuses {
			j.Runs[string(st)] = 0
		}
		for _, step := range wf.Steps {
			j.Active[step] = 0
		}
		active, err := wf.Runs.Active(ctx)
		for step, n := range active {
			j.Active[step] = n // a step a reload removed shows while runs are still there
		}
		byStatus, at, cerr := s.counts.get(wf, s.countsEvery(), waitUntil)
		for st, n := range byStatus {
			j.Runs[string(st)] = n
		}
		if !at.IsZero() {
			at = at.UTC()
			j.CountedAt = &at
		}
		if err = errors.Join(err, cerr); err != nil {
			j.Error = err.Error()
		}
		out.Workflows = append(out.Workflows, j)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) countsEvery() time.Duration { return max(s.o.SampleEvery, minCounts) }

func nonNilList(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// runCounts keeps each workflow's runs per status, counted at most once per period, one count
// at a time, in the background: a visitor's polling never makes flowrun walk the runs more
// often than that, and a request waits for a count only a moment (a workflow of millions of
// runs takes longer to count: the page shows the counts when they are there).
type runCounts struct {
	mu sync.Mutex
	by map[string]*countEntry
}

type countEntry struct {
	at     time.Time // when counts were counted (zero: never)
	tried  time.Time // when the last count ended, counted or failed (zero: count now)
	counts map[workflow.Status]int64
	err    error         // the last count's
	done   chan struct{} // the count under way, closed when it ends; nil: none
}

// get returns the counts of wf, starting a count when the last one ended more than every ago,
// and waiting for a count under way until deadline.
func (c *runCounts) get(wf Workflow, every time.Duration, deadline time.Time) (map[workflow.Status]int64, time.Time, error) {
	c.mu.Lock()
	if c.by == nil {
		c.by = map[string]*countEntry{}
	}
	e := c.by[wf.Name]
	if e == nil {
		e = &countEntry{}
		c.by[wf.Name] = e
	}
	if e.done == nil && (e.tried.IsZero() || time.Since(e.tried) >= every) {
		e.done = make(chan struct{})
		go c.count(e, wf)
	}
	done := e.done
	c.mu.Unlock()
	if done != nil {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return e.counts, e.at, e.err
}

// count counts wf's runs into e; on an error e keeps the last counts, with the error.
func (c *runCounts) count(e *countEntry, wf Workflow) {
	ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
	defer cancel()
	_, counts, err := wf.Runs.Counts(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		e.counts, e.at = counts, time.Now()
	}
	e.err, e.tried = err, time.Now()
	close(e.done)
	e.done = nil
}

// forget makes the next request count wf's runs again (an action changed them).
func (c *runCounts) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.by[name]; e != nil {
		e.tried = time.Time{}
	}
}

// findWorkflow finds a workflow by the request's {name}, or answers 404.
func (s *server) findWorkflow(w http.ResponseWriter, r *http.Request) (Workflow, bool) {
	name := r.PathValue("name")
	for _, wf := range s.workflowList() {
		if wf.Name == name {
			return wf, true
		}
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("no workflow %q", name))
	return Workflow{}, false
}

// runItemJSON is one run of a list.
type runItemJSON struct {
	ID        string     `json:"id"`
	Status    string     `json:"status"`
	Step      string     `json:"step"`
	StartedAt *time.Time `json:"started_at"`
	UpdatedAt *time.Time `json:"updated_at"`
}

type runListJSON struct {
	Workflow string        `json:"workflow"`
	Status   string        `json:"status"`
	Limit    int           `json:"limit"`
	Runs     []runItemJSON `json:"runs"`
	More     bool          `json:"more"` // there may be more than limit
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func (s *server) runList(w http.ResponseWriter, r *http.Request) {
	wf, ok := s.findWorkflow(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	status := workflow.Status(q.Get("status"))
	if status != "" && !slices.Contains(workflow.Statuses, status) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("status %q: want one of %v", status, workflow.Statuses))
		return
	}
	limit, err := intParam(q.Get("limit"), defaultRuns)
	if err != nil || limit < 1 {
		writeError(w, http.StatusBadRequest, "limit: want a whole number, 1 or more")
		return
	}
	limit = min(limit, maxRuns)
	release, err := s.scans.take(r)
	if err != nil {
		writeError(w, http.StatusTooManyRequests, err.Error())
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), runsTimeout)
	defer cancel()
	runs, err := wf.Runs.List(ctx, status, limit+1)
	if err != nil {
		code := http.StatusBadGateway
		if errors.Is(err, context.DeadlineExceeded) {
			code = http.StatusGatewayTimeout
		}
		writeError(w, code, fmt.Sprintf("runs of %s: %v", wf.Name, err))
		return
	}
	out := runListJSON{Workflow: wf.Name, Status: string(status), Limit: limit, Runs: []runItemJSON{}, More: len(runs) > limit}
	for _, st := range runs[:min(len(runs), limit)] {
		out.Runs = append(out.Runs, runItemJSON{ID: st.ID, Status: string(st.Status), Step: st.Step,
			StartedAt: timePtr(st.StartedAt), UpdatedAt: timePtr(st.UpdatedAt)})
	}
	writeJSON(w, http.StatusOK, out)
}

// eventJSON is one entry of a run's timeline.
type eventJSON struct {
	Step    string     `json:"step"`
	Visit   int        `json:"visit"`
	Attempt int        `json:"attempt"`
	Outcome string     `json:"outcome"`
	At      *time.Time `json:"at"`
	SinceMS *int64     `json:"since_ms"` // since the entry before it (null for the first)
	Error   string     `json:"error"`
}

// outputJSON is a finished step's output, as text.
type outputJSON struct {
	Step   string `json:"step"`
	Output string `json:"output"`
}

// runJSON is a run, whole, as GET /api/workflows/{name}/run shows it.
type runJSON struct {
	ID          string       `json:"id"`
	Workflow    string       `json:"workflow"`
	Status      string       `json:"status"`
	Step        string       `json:"step"`
	Visit       int          `json:"visit"`
	WaitingIn   string       `json:"waiting_in"` // the step a waiting run waits in
	InStepMS    *int64       `json:"in_step_ms"` // how long an active run has been in its step
	TimesOutAt  *time.Time   `json:"times_out_at"`
	Error       string       `json:"error"`
	FailedStep  string       `json:"failed_step"`
	Compensated bool         `json:"compensated"`
	Cancellable bool         `json:"cancellable"`
	Retryable   bool         `json:"retryable"`
	StartedAt   *time.Time   `json:"started_at"`
	UpdatedAt   *time.Time   `json:"updated_at"`
	TookMS      *int64       `json:"took_ms"` // start to end, or to now while active
	Input       string       `json:"input"`   // pretty-printed when JSON
	Outputs     []outputJSON `json:"outputs"` // in the order the steps finished
	History     []eventJSON  `json:"history"`
}

func (s *server) runShow(w http.ResponseWriter, r *http.Request) {
	wf, ok := s.findWorkflow(w, r)
	if !ok {
		return
	}
	id := r.URL.Query().Get("id")
	if id == "" {
		writeError(w, http.StatusBadRequest, "id: name the run")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), runsTimeout)
	defer cancel()
	st, ok := getRun(w, ctx, wf, id)
	if !ok {
		return
	}
	out := runOf(st, time.Now())
	if st.Status.Active() && st.Step != "" {
		at, ok, err := wf.Runs.Deadline(ctx, st.ID, st.Visit)
		if err != nil {
			writeError(w, http.StatusBadGateway, err.Error())
			return
		}
		if ok {
			out.TimesOutAt = timePtr(at)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// getRun reads a run, or answers 404 (no such run) or 502.
func getRun(w http.ResponseWriter, ctx context.Context, wf Workflow, id string) (*workflow.State, bool) {
	st, err := wf.Runs.Get(ctx, id)
	if errors.Is(err, workflow.ErrNoRun) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("workflow %q has no run %q", wf.Name, id))
		return nil, false
	}
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("run %q of %s: %v", id, wf.Name, err))
		return nil, false
	}
	return st, true
}

func msPtr(d time.Duration) *int64 {
	ms := max(d, 0).Milliseconds()
	return &ms
}

// runOf lays st out for the page, at now.
func runOf(st *workflow.State, now time.Time) runJSON {
	out := runJSON{ID: st.ID, Workflow: st.Workflow, Status: string(st.Status), Step: st.Step, Visit: st.Visit,
		Error: st.Error, FailedStep: st.FailedStep, Compensated: st.Compensated,
		Cancellable: st.Status == workflow.Running || st.Status == workflow.Waiting,
		Retryable:   st.Status == workflow.Failed && !st.Compensated && st.FailedStep != "",
		StartedAt:   timePtr(st.StartedAt), UpdatedAt: timePtr(st.UpdatedAt),
		Input: pretty(st.Input), Outputs: []outputJSON{}, History: []eventJSON{}}
	if st.Status == workflow.Waiting {
		out.WaitingIn = st.Step
	}
	end := st.UpdatedAt
	if st.Status.Active() {
		end = now
	}
	if !st.StartedAt.IsZero() && !end.IsZero() {
		out.TookMS = msPtr(end.Sub(st.StartedAt))
	}
	var prev time.Time
	for _, e := range st.History {
		ev := eventJSON{Step: e.Step, Visit: e.Visit, Attempt: e.Attempt, Outcome: e.Outcome, At: timePtr(e.At), Error: e.Error}
		if !prev.IsZero() && !e.At.IsZero() {
			ev.SinceMS = msPtr(e.At.Sub(prev))
		}
		if !e.At.IsZero() {
			prev = e.At
		}
		out.History = append(out.History, ev)
	}
	if st.Status.Active() && st.Step != "" && !prev.IsZero() {
		out.InStepMS = msPtr(now.Sub(prev))
	}
	for _, name := range outputOrder(st) {
		out.Outputs = append(out.Outputs, outputJSON{Step: name, Output: pretty(st.Steps[name])})
	}
	return out
}

// outputOrder names the steps with an output: in the order they finished, then the rest
// (compensations) by name.
func outputOrder(st *workflow.State) []string {
	var names []string
	for _, name := range st.Finished {
		if _, ok := st.Steps[name]; ok && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	var rest []string
	for name := range st.Steps {
		if !slices.Contains(names, name) {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	return append(names, rest...)
}

// pretty is a stored value as text: indented when it is JSON, else as it is.
func pretty(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var out bytes.Buffer
	if json.Valid(b) && json.Indent(&out, b, "", "  ") == nil {
		return unescapeHTML(out.String())
	}
	return string(b)
}

// unescapeHTML turns the \u003c, \u003e and \u0026 that Go's encoder writes for <, > and & in
// JSON strings back into those characters (the same JSON): the page shows text, and a visitor
// reads a payload's markup as it was sent. An escaped backslash before them is left alone.
func unescapeHTML(s string) string {
	if !strings.Contains(s, `\u00`) {
		return s
	}
	var b strings.Builder
	slashes := 0 // backslashes just before i
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && slashes%2 == 0 && i+6 <= len(s) {
			if r, ok := htmlEscapes[s[i:i+6]]; ok {
				b.WriteByte(r)
				i += 5
				slashes = 0
				continue
			}
		}
		if s[i] == '\\' {
			slashes++
		} else {
			slashes = 0
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var htmlEscapes = map[string]byte{`\u003c`: '<', `\u003e`: '>', `\u0026`: '&'}

// runActionJSON is the body of a cancel or retry.
type runActionJSON struct {
	ID string `json:"id"`
}

// runAction reads the body and the run an action names, or answers why not.
func (s *server) runAction(w http.ResponseWriter, r *http.Request) (Workflow, *workflow.State, bool) {
	wf, ok := s.findWorkflow(w, r)
	if !ok {
		return Workflow{}, nil, false
	}
	var a runActionJSON
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&a); err != nil || a.ID == "" {
		msg := "body: want JSON {\"id\": \"RUN\"}"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, http.StatusBadRequest, msg)
		return Workflow{}, nil, false
	}
	st, ok := getRun(w, r.Context(), wf, a.ID)
	return wf, st, ok
}

func (s *server) runCancel(w http.ResponseWriter, r *http.Request) {
	wf, st, ok := s.runAction(w, r)
	if !ok {
		return
	}
	if st.Status != workflow.Running && st.Status != workflow.Waiting {
		writeError(w, http.StatusConflict, fmt.Sprintf("run %q is %s, not running or waiting: only those are cancelled", st.ID, st.Status))
		return
	}
	err := wf.Runs.Cancel(r.Context(), st.ID)
	if errors.Is(err, workflow.ErrNoRun) || errors.Is(err, redisrun.ErrNotActive) {
		writeError(w, http.StatusConflict, fmt.Sprintf("run %q is no longer running or waiting", st.ID))
		return
	}
	s.actionDone(w, wf, st, "cancel", err, fmt.Sprintf("cancelled run %s", st.ID))
}

func (s *server) runRetry(w http.ResponseWriter, r *http.Request) {
	wf, st, ok := s.runAction(w, r)
	if !ok {
		return
	}
	err := st.Retryable()
	if err == nil {
		err = wf.Runs.Retry(r.Context(), st.ID)
	}
	if errors.Is(err, workflow.ErrNotRetryable) || errors.Is(err, workflow.ErrNoRun) {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	s.actionDone(w, wf, st, "retry", err, fmt.Sprintf("retrying run %s at step %s", st.ID, st.FailedStep))
}

// actionDone answers a cancel or retry that was tried: 200 with what it did, or 502.
func (s *server) actionDone(w http.ResponseWriter, wf Workflow, st *workflow.State, action string, err error, msg string) {
	s.counts.forget(wf.Name)
	if err != nil {
		writeError(w, http.StatusBadGateway, fmt.Sprintf("%s run %q: %v", action, st.ID, err))
		return
	}
	s.o.Logger.Info().Str("workflow", wf.Name).Str("run", st.ID).Msg("status page: run " + action)
	writeJSON(w, http.StatusOK, actionResult{Action: action, Count: 1, Message: msg})
}
