package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Workflows through the binary (issue 27): runs that complete with their state in Redis, the
// order of compensations, a stopped run retried, and a step's delay and timeout that outlive the
// process that scheduled them.

const wfDeadline = 60 * time.Second

// wfRun is `flowrun runs show WF RUN --json`.
type wfRun struct {
	ID        string                     `json:"id"`
	Workflow  string                     `json:"workflow"`
	Status    string                     `json:"status"`
	Step      string                     `json:"step"`
	Input     json.RawMessage            `json:"input"`
	Steps     map[string]json.RawMessage `json:"steps"`
	Error     string                     `json:"error"`
	StartedAt time.Time                  `json:"started_at"`
	UpdatedAt time.Time                  `json:"updated_at"`
	History   []wfEvent                  `json:"history"`
}

type wfEvent struct {
	Step    string    `json:"step"`
	Visit   int       `json:"visit"`
	Attempt int       `json:"attempt"`
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// finished lists the steps whose visit was acknowledged without an error (a rule's fail acks
// its delivery with the reason), in history order: the run's path.
func (r *wfRun) finished() []string {
	var out []string
	for _, e := range r.History {
		if e.Step != "" && e.Outcome == "ack" {
			out = append(out, e.Step)
		}
	}
	return out
}

// outcomes lists the history's outcomes, in order.
func (r *wfRun) outcomes() []string {
	var out []string
	for _, e := range r.History {
		out = append(out, e.Outcome)
	}
	return out
}

// output decodes the output of step into v.
func (r *wfRun) output(t *testing.T, step string, v any) {
	t.Helper()
	raw, ok := r.Steps[step]
	if !ok {
		t.Fatalf("run %s has no output of %s: %v", r.ID, step, r.Steps)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("output of %s: %v (%s)", step, err, raw)
	}
}

// runsShow is `flowrun runs show WF RUN --json CFG`; ok is false while the run does not exist.
func runsShow(t *testing.T, cfg, wf, id string) (*wfRun, bool) {
	t.Helper()
	r := flowrun(t, "", "runs", "show", wf, id, "--json", cfg)
	if r.code != 0 {
		return nil, false
	}
	var run wfRun
	if err := json.Unmarshal([]byte(r.stdout), &run); err != nil {
		t.Fatalf("runs show --json: %v\n%s", err, r.stdout)
	}
	return &run, true
}

// waitRun polls runs show until the run's status is one of want, and returns it.
func waitRun(t *testing.T, cfg, wf, id string, want ...string) *wfRun {
	t.Helper()
	var run *wfRun
	eventually(t, wfDeadline, fmt.Sprintf("run %s/%s to be %v", wf, id, want), func() bool {
		r, ok := runsShow(t, cfg, wf, id)
		run = r
		return ok && slices.Contains(want, r.Status)
	})
	return run
}

// wfConfig writes flow.hcl: the redis block on the test's server, then body.
func (e *streamEnv) wfConfig(body string) string {
	e.t.Helper()
	return e.streamConfig(body)
}

// wfStart is the start block of a workflow reading the stream "orders".
const wfStart = `  start {
    source "stream" {
      stream = "orders"
      block  = "100ms"
    }
  }
`

func (e *streamEnv) order(fields string) {
	e.t.Helper()
	e.streamXAdd("orders", "payload", fields)
}

// stepPending is the number of deliveries pending in a step stream's group.
func (e *streamEnv) stepPending(wf, step string) int64 {
	e.t.Helper()
	p, err := e.rdb.XPending(e.ctx, "flowrun:{"+wf+"}:s:"+step, wf).Result()
	if err != nil {
		e.t.Fatalf("xpending of step %s: %v", step, err)
	}
	return p.Count
}

func stopProc(t *testing.T, p *proc) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Errorf("flowrun exit %d after SIGTERM; stderr:\n%s", code, p.err.String())
	}
}

// TestWorkflowRunsToCompletion: a workflow of rules steps with outputs, one of them a choice,
// runs two orders to completion; the run records, outputs, history, expiry and step streams in
// Redis say so, and a second start message for a run that exists starts nothing.
func TestWorkflowRunsToCompletion(t *testing.T) {
	e := newStreamEnv(t)
	cfg := e.wfConfig(`workflow "order" {
  run_id    = "payload.order_id"
  retention = "1h"
` + wfStart + `
  step "reserve" {
    rule "reserve" {
      output = "{'sku': input.sku, 'reservation': 'r-' + run.id, 'visit': run.visit}"
    }
    next = "charge"
  }

  step "charge" {
    rule "charge" {
      output = "{'amount': input.amount, 'reservation': steps.reserve.reservation}"
    }
    next = "check"
  }

  step "check" {
    rule "large" {
      when = "steps.charge.amount > 100"
      next = "review"
    }
    rule "small" {
      complete = true
      output   = "'fine'"
    }
  }

  step "review" {
    rule "review" {
      output = "'reviewed ' + run.id"
    }
  }
}
`)
	p := start(t, "run", "--consumer", "w1", cfg)
	e.order(`{"order_id":"o-1","sku":"tea","amount":12}`)
	e.order(`{"order_id":"o-2","sku":"tea","amount":500}`)

	small := waitRun(t, cfg, "order", "o-1", "completed", "failed", "cancelled", "compensation_failed")
	large := waitRun(t, cfg, "order", "o-2", "completed", "failed", "cancelled", "compensation_failed")
	for _, c := range []struct {
		run  *wfRun
		path []string
	}{{small, []string{"reserve", "charge", "check"}}, {large, []string{"reserve", "charge", "check", "review"}}} {
		r := c.run
		if r.Status != "completed" || r.Workflow != "order" || r.Step != "" || r.Error != "" {
			t.Errorf("run %s: status %q workflow %q step %q error %q, want completed order, no step, no error", r.ID, r.Status, r.Workflow, r.Step, r.Error)
		}
		if got := r.finished(); !slices.Equal(got, c.path) {
			t.Errorf("run %s finished %v, want %v; history %+v", r.ID, got, c.path, r.History)
		}
		out := r.outcomes()
		if len(out) < 2 || out[0] != "started" || out[len(out)-1] != "completed" {
			t.Errorf("run %s history %v: want started first and completed last", r.ID, out)
		}
		visit := 0
		for _, ev := range r.History {
			if ev.Outcome == "ack" {
				visit++
				if ev.Visit != visit || ev.Attempt != 1 {
					t.Errorf("run %s: %s acked at visit %d attempt %d, want visit %d attempt 1", r.ID, ev.Step, ev.Visit, ev.Attempt, visit)
				}
			}
		}
		var res struct {
			SKU, Reservation string
			Visit            int
		}
		r.output(t, "reserve", &res)
		if res.SKU != "tea" || res.Reservation != "r-"+r.ID || res.Visit != 1 {
			t.Errorf("run %s: reserve's output %+v", r.ID, res)
		}
		var ch struct {
			Amount      float64
			Reservation string
		}
		r.output(t, "charge", &ch)
		if ch.Reservation != "r-"+r.ID {
			t.Errorf("run %s: charge saw steps.reserve %+v", r.ID, ch)
		}
		if r.StartedAt.IsZero() || r.UpdatedAt.Before(r.StartedAt) {
			t.Errorf("run %s: started_at %v updated_at %v", r.ID, r.StartedAt, r.UpdatedAt)
		}
	}
	var fine, reviewed string
	small.output(t, "check", &fine)
	large.output(t, "review", &reviewed)
	if fine != "fine" || reviewed != "reviewed o-2" {
		t.Errorf("outputs: check %q, review %q", fine, reviewed)
	}

	// The state in Redis: the run hash, its outputs, its expiry after retention, nothing pending.
	for _, id := range []string{"o-1", "o-2"} {
		key := "flowrun:{order}:run:" + id
		if st := e.rdb.HGet(e.ctx, key, "status").Val(); st != "completed" {
			t.Errorf("%s status %q in Redis", key, st)
		}
		for _, k := range []string{key, "flowrun:{order}:out:" + id, "flowrun:{order}:hist:" + id} {
			if ttl := e.rdb.TTL(e.ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
				t.Errorf("%s TTL %v, want the 1h retention", k, ttl)
			}
		}
	}
	if outs := e.rdb.HGetAll(e.ctx, "flowrun:{order}:out:o-2").Val(); len(outs) != 3 { // check's rule "large" records none
		t.Errorf("outputs of o-2 in Redis: %v", outs)
	}
	for _, step := range []string{"reserve", "charge", "check", "review"} {
		if n := e.stepPending("order", step); n != 0 {
			t.Errorf("step %s: %d pending", step, n)
		}
	}

	// A second start message for o-1 starts nothing: the run and its history are as they were.
	e.order(`{"order_id":"o-1","sku":"coffee","amount":1}`)
	eventually(t, wfDeadline, "the third start message settled", func() bool {
		gs, err := e.rdb.XInfoGroups(e.ctx, "orders").Result()
		return err == nil && len(gs) == 1 && gs[0].EntriesRead == 3 && gs[0].Pending == 0
	})
	again, _ := runsShow(t, cfg, "order", "o-1")
	if len(again.History) != len(small.History) || string(again.Input) != string(small.Input) {
		t.Errorf("a duplicate start message changed run o-1:\n%+v\nwas\n%+v", again, small)
	}
	r := flowrun(t, "", "runs", "list", "order", "--json", cfg)
	var list []struct{ ID, Status string }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 {
		t.Errorf("runs list --json: %v %d runs:\n%s%s", err, len(list), r.stdout, r.stderr)
	}
	stopProc(t, p)
}

// TestWorkflowCompensationOrder: a run that fails at its third step runs the compensations of
// the two steps that finished in the reverse order of finishing and ends failed, its failed
// step's message in the dead letter with x-run-id; a compensated run cannot be retried.
func TestWorkflowCompensationOrder(t *testing.T) {
	e := newStreamEnv(t)
	undo := func(name string) string {
		return fmt.Sprintf(`  step %q {
    rule "undo" {
      emit "stream" {
        key     = "undo"
        payload = "{'run': run.id, 'step': run.step, 'visit': run.visit}"
      }
      output = "'undone ' + run.step"
    }
  }
`, name)
	}
	cfg := e.wfConfig(`workflow "order" {
  run_id     = "payload.order_id"
  on_failure = "compensate"
` + wfStart + `
  step "reserve" {
    rule "ok" {
      output = "'reserved'"
    }
    compensate = "release"
    next       = "charge"
  }

  step "charge" {
    rule "ok" {
      output = "'charged'"
    }
    compensate = "refund"
    next       = "ship"
  }

  step "ship" {
    rule "no-carrier" {
      fail = "'no carrier ships to ' + input.country"
    }
  }

` + undo("refund") + "\n" + undo("release") + `}
`)
	p := start(t, "run", "--consumer", "w1", cfg)
	e.order(`{"order_id":"o-9","country":"AQ"}`)
	r := waitRun(t, cfg, "order", "o-9", "failed", "completed", "compensation_failed", "cancelled")
	if r.Status != "failed" {
		t.Fatalf("status %q, want failed; history %+v", r.Status, r.History)
	}
	if want := []string{"reserve", "charge", "refund", "release"}; !slices.Equal(r.finished(), want) {
		t.Errorf("finished %v, want %v (compensations in reverse order of finishing)", r.finished(), want)
	}
	if !strings.Contains(r.Error, "no carrier ships to AQ") {
		t.Errorf("error %q, want the rule's reason", r.Error)
	}
	if !slices.Contains(r.outcomes(), "failed") {
		t.Errorf("history %v has no failed event", r.outcomes())
	}
	var undone string
	r.output(t, "release", &undone)
	if undone != "undone release" {
		t.Errorf("release's output %q", undone)
	}
	// The compensations wrote their events in that order too, each its own visit.
	msgs := e.streamXRange("undo")
	if len(msgs) != 2 {
		t.Fatalf("%d undo events, want 2: %v", len(msgs), msgs)
	}
	var first, second struct {
		Run, Step string
		Visit     int
	}
	json.Unmarshal([]byte(msgs[0].Values["payload"].(string)), &first)
	json.Unmarshal([]byte(msgs[1].Values["payload"].(string)), &second)
	if first.Step != "refund" || second.Step != "release" || first.Run != "o-9" || second.Visit <= first.Visit || first.Visit <= 3 {
		t.Errorf("undo events %+v then %+v: want refund then release of o-9, visits after ship's 3", first, second)
	}
	dead := e.streamXRange("flowrun:{order}:dead")
	if len(dead) != 1 || dead[0].Values["x-run-id"] != "o-9" || !strings.Contains(fmt.Sprint(dead[0].Values["x-dead-letter-reason"]), "no carrier ships to AQ") {
		t.Errorf("dead letter %v: want one entry with x-run-id o-9 and the rule's reason", dead)
	}
	if res := flowrun(t, "", "runs", "retry", "order", "o-9", cfg); res.code != 1 {
		t.Errorf("runs retry of a compensated run: exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := flowrun(t, "", "runs", "show", "order", "o-404", cfg); res.code != 1 {
		t.Errorf("runs show of an unknown run: exit %d, want 1", res.code)
	}
	stopProc(t, p)
}

// wfServer is an http handler for steps: it records every call's Idempotency-Key and body,
// and answers with what answer returns.
type wfServer struct {
	*httptest.Server
	mu    sync.Mutex
	calls []wfCall
}

type wfCall struct {
	Key  string
	Body string
	At   time.Time
}

func newWFServer(t *testing.T, answer func(call wfCall) (int, string)) *wfServer {
	s := &wfServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c := wfCall{Key: r.Header.Get("Idempotency-Key"), Body: string(b), At: time.Now()}
		s.mu.Lock()
		s.calls = append(s.calls, c)
		s.mu.Unlock()
		code, body := answer(c)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *wfServer) recorded() []wfCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// TestWorkflowStopThenRetry: under on_failure = "stop" a permanent failure of the http step ends
// the run failed with its state kept and its message in the dead letter; once the service is
// fixed, `flowrun runs retry` resumes it at that step and it completes, the finished step not
// run again.
func TestWorkflowStopThenRetry(t *testing.T) {
	e := newStreamEnv(t)
	var fixed atomic.Bool
	srv := newWFServer(t, func(wfCall) (int, string) {
		if !fixed.Load() {
			return 400, `{"error":"card expired"}`
		}
		return 200, `{"id":"ch-1","status":"paid"}`
	})
	cfg := e.wfConfig(fmt.Sprintf(`workflow "order" {
  run_id     = "payload.order_id"
  on_failure = "stop"
`+wfStart+`
  step "reserve" {
    rule "ok" {
      output = "'reserved'"
    }
    compensate = "release"
    next       = "charge"
  }

  step "charge" {
    handler "http" {
      url = %q
    }
    payload = "{'order': run.id}"
    next    = "ship"
  }

  step "ship" {
    rule "ship" {
      output = "steps.charge.id"
    }
  }

  step "release" {
    rule "ok" {
      output = "'released'"
    }
  }
}
`, srv.URL))
	p := start(t, "run", "--consumer", "w1", cfg)
	e.order(`{"order_id":"o-5"}`)
	r := waitRun(t, cfg, "order", "o-5", "failed", "completed", "compensation_failed", "cancelled")
	if r.Status != "failed" || !slices.Equal(r.finished(), []string{"reserve"}) {
		t.Fatalf("status %q finished %v, want failed after reserve, nothing compensated; history %+v", r.Status, r.finished(), r.History)
	}
	if fs := e.rdb.HGet(e.ctx, "flowrun:{order}:run:o-5", "failed_step").Val(); fs != "charge" {
		t.Errorf("failed_step %q in Redis, want charge", fs)
	}
	if !strings.Contains(r.Error, "400") {
		t.Errorf("error %q, want the http status", r.Error)
	}
	calls := srv.recorded()
	if len(calls) != 1 || calls[0].Key != "order/o-5/charge/2" || !strings.Contains(calls[0].Body, `"o-5"`) {
		t.Errorf("calls %+v: want one, with Idempotency-Key order/o-5/charge/2", calls)
	}
	dead := e.streamXRange("flowrun:{order}:dead")
	if len(dead) != 1 || dead[0].Values["x-run-id"] != "o-5" || !strings.Contains(fmt.Sprint(dead[0].Values["x-dead-letter-reason"]), "400") {
		t.Errorf("dead letter %v: want one entry with x-run-id o-5 and the reason", dead)
	}

	fixed.Store(true)
	if res := flowrun(t, "", "runs", "retry", "order", "o-5", cfg); res.code != 0 {
		t.Fatalf("runs retry: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	r = waitRun(t, cfg, "order", "o-5", "completed", "compensation_failed", "cancelled")
	if r.Status != "completed" || !slices.Equal(r.finished(), []string{"reserve", "charge", "ship"}) {
		t.Fatalf("after retry: status %q finished %v; history %+v", r.Status, r.finished(), r.History)
	}
	var id string
	r.output(t, "ship", &id)
	if id != "ch-1" {
		t.Errorf("ship's output %q, want the charge's id", id)
	}
	calls = srv.recorded()
	if len(calls) != 2 || calls[1].Key == "" {
		t.Errorf("calls %+v: want a second call with an Idempotency-Key", calls)
	}
	if _, ok := r.Steps["release"]; ok {
		t.Errorf("release ran under on_failure = \"stop\": %v", r.Steps)
	}
	if res := flowrun(t, "", "runs", "retry", "order", "o-5", cfg); res.code != 1 {
		t.Errorf("runs retry of a completed run: exit %d, want 1", res.code)
	}
	stopProc(t, p)
}

// TestWorkflowDelaySurvivesKill: a step's delay is kept in Redis; the process that scheduled it
// is killed with SIGKILL while it waits, and a second process enters the step when it is due.
func TestWorkflowDelaySurvivesKill(t *testing.T) {
	e := newStreamEnv(t)
	cfg := e.wfConfig(`workflow "order" {
  run_id = "payload.order_id"
` + wfStart + `
  step "a" {
    rule "a" {
      output = "now().UnixMilli()"
    }
    next = "b"
  }

  step "b" {
    delay = "3s"
    rule "b" {
      output = "now().UnixMilli()"
    }
  }
}
`)
	p1 := start(t, "run", "--consumer", "w1", cfg)
	e.order(`{"order_id":"o-1"}`)
	eventually(t, wfDeadline, "step b's message in the delayed set", func() bool {
		return e.rdb.ZCard(e.ctx, "flowrun:{order}:delayed").Val() == 1
	})
	p1.signal(syscall.SIGKILL)
	p1.wait(10 * time.Second)
	p2 := start(t, "run", "--consumer", "w2", cfg)
	r := waitRun(t, cfg, "order", "o-1", "completed", "failed", "cancelled")
	if r.Status != "completed" || !slices.Equal(r.finished(), []string{"a", "b"}) {
		t.Fatalf("status %q finished %v; history %+v", r.Status, r.finished(), r.History)
	}
	var a, b int64
	r.output(t, "a", &a)
	r.output(t, "b", &b)
	if b-a < 2900 {
		t.Errorf("b ran %dms after a, want the 3s delay", b-a)
	}
	if n := e.rdb.ZCard(e.ctx, "flowrun:{order}:delayed").Val(); n != 0 {
		t.Errorf("%d left in the delayed set", n)
	}
	stopProc(t, p2)
}

// TestWorkflowTimeoutSurvivesKill: a step that keeps asking to be retried later has a timeout,
// kept in Redis; the process that registered it is killed with SIGKILL, and a second process
// fires it, moving the run to on_timeout.
func TestWorkflowTimeoutSurvivesKill(t *testing.T) {
	e := newStreamEnv(t)
	cfg := e.wfConfig(`workflow "order" {
  run_id = "payload.order_id"
` + wfStart + `
  step "approve" {
    rule "not-yet" {
      outcome = "retry_after('1m')"
    }
    max_attempts = 10
    timeout      = "3s"
    on_timeout   = "expire"
  }

  step "expire" {
    rule "expire" {
      output = "'expired'"
    }
  }
}
`)
	p1 := start(t, "run", "--consumer", "w1", cfg)
	began := time.Now()
	e.order(`{"order_id":"o-1"}`)
	eventually(t, wfDeadline, "approve's timeout registered and its first attempt settled", func() bool {
		r, ok := runsShow(t, cfg, "order", "o-1")
		return ok && e.rdb.ZCard(e.ctx, "flowrun:{order}:timeouts").Val() == 1 && slices.Contains(r.outcomes(), "retry_after")
	})
	p1.signal(syscall.SIGKILL)
	p1.wait(10 * time.Second)
	p2 := start(t, "run", "--consumer", "w2", cfg)
	r := waitRun(t, cfg, "order", "o-1", "completed", "failed", "cancelled")
	if r.Status != "completed" || !slices.Equal(r.finished(), []string{"expire"}) || !slices.Contains(r.outcomes(), "timeout") {
		t.Fatalf("status %q finished %v outcomes %v: want completed through expire after a timeout", r.Status, r.finished(), r.outcomes())
	}
	if took := r.UpdatedAt.Sub(began); took < 3*time.Second-100*time.Millisecond {
		t.Errorf("run ended %v after it started, before its 3s timeout", took)
	}
	if n := e.rdb.ZCard(e.ctx, "flowrun:{order}:timeouts").Val(); n != 0 {
		t.Errorf("%d timeouts left", n)
	}
	stopProc(t, p2)
}
