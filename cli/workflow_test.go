package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// lockedBuffer is a buffer run writes its logs to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startRun runs `flowrun run ARGS` until the test ends; its stderr is returned.
func startRun(t *testing.T, args ...string) *lockedBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errs := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, append([]string{"run", "--log-level", "warn"}, args...), Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: errs})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != ExitOK {
				t.Errorf("run: exit %d, stderr:\n%s", code, errs.String())
			}
		case <-time.After(20 * time.Second):
			t.Errorf("run did not stop; stderr:\n%s", errs.String())
		}
	})
	return errs
}

// waitRun polls `runs show --json` until the run has the status, and returns what it shows.
func waitRun(t *testing.T, dir, id, status string, errs *lockedBuffer) map[string]json.RawMessage {
	t.Helper()
	var show map[string]json.RawMessage
	ok := redistest.WaitFor(context.Background(), 15*time.Second, func() bool {
		out, _, code := runCLI(t, "runs", "show", "order", id, "--json", dir)
		show = nil
		return code == ExitOK && json.Unmarshal([]byte(out), &show) == nil && string(show["status"]) == `"`+status+`"`
	})
	if !ok {
		t.Fatalf("run %s is not %s: %s %s\nrun's stderr:\n%s", id, status, show["status"], show["error"], errs.String())
	}
	return show
}

// `flowrun run` runs a workflow: the start pipeline creates the run from the start stream's
// message (run_id from its payload), each step pipeline moves it on, and the run completes
// with every step's output; runs_total counts it.
func TestRunWorkflow(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	src := fmt.Sprintf(`
redis "main" {
  url = %q
}

workflow "order" {
  run_id = "payload.order_id"

  start {
    source "stream" {
      stream = "orders"
    }
  }

  step "reserve" {
    rule "ok" {
      output = "{'sku': input.sku}"
    }
    next = "charge"
  }

  step "charge" {
    max_attempts = 2
    rule "declined" {
      when    = "input.sku == 'bad'"
      outcome = "retry"
    }
    rule "ok" {
      output = "steps.reserve.sku + '-charged'"
    }
  }
}
`, srv.URL)
	if err := os.WriteFile(filepath.Join(dir, "order.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	errs := startRun(t, "--http-addr", addr, dir)
	c := srv.Client(t)
	ctx := context.Background()
	for _, m := range []map[string]any{{"order_id": "o1", "sku": "A1"}, {"order_id": "o2", "sku": "bad"}} {
		b, _ := json.Marshal(m)
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: map[string]any{"payload": string(b)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	show := waitRun(t, dir, "o1", "completed", errs)
	if got := compact(t, show["steps"]); got != `{"charge":"A1-charged","reserve":{"sku":"A1"}}` {
		t.Errorf("steps %s", got)
	}
	show = waitRun(t, dir, "o2", "failed", errs)
	if !strings.Contains(string(show["error"]), "attempts") {
		t.Errorf("failed run's error %s", show["error"])
	}
	// The metrics count the runs this process ended, and read the active runs from Redis.
	var scraped string
	ok := redistest.WaitFor(ctx, 15*time.Second, func() bool {
		scraped, _ = get("http://" + addr + "/metrics")
		return strings.Contains(scraped, `flowrun_runs_total{status="failed",workflow="order"} 1`)
	})
	for _, want := range []string{
		`flowrun_runs_total{status="completed",workflow="order"} 1`,
		`flowrun_run_seconds_count{workflow="order"} 2`,
		`flowrun_runs_active{step="charge",workflow="order"} 0`,
		`flowrun_runs_active{step="reserve",workflow="order"} 0`,
		`flowrun_messages_total{outcome="ack",pipeline="order/reserve"} 2`,
	} {
		if !ok || !strings.Contains(scraped, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(scraped, "flowrun_run"))
		}
	}
	// inspect: the start pipeline's row, and the workflow's runs per status and per step.
	out, errOut, code := runCLI(t, "inspect", "--json", dir)
	var rows []map[string]json.RawMessage
	if code != ExitOK || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 {
		t.Fatalf("inspect --json: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if string(rows[0]["pipeline"]) != `"order"` || string(rows[0]["key"]) != `"orders"` {
		t.Errorf("start pipeline's row %v", rows[0])
	}
	if got := compact(t, rows[1]["runs"]); !strings.Contains(got, `"completed":1`) || !strings.Contains(got, `"failed":1`) || !strings.Contains(got, `"running":0`) {
		t.Errorf("inspect runs %s", got)
	}
	if got := compact(t, rows[1]["active"]); got != `{"charge":0,"reserve":0}` {
		t.Errorf("inspect active %s", got)
	}
	out, _, _ = runCLI(t, "inspect", dir)
	if !strings.Contains(out, "COMPENSATION_FAILED") || !strings.Contains(out, "WORKFLOW  STEP") {
		t.Errorf("inspect table:\n%s", out)
	}
	// The failed step's message is in the workflow's dead letter, with x-run-id.
	out, errOut, code = runCLI(t, "dlq", "list", "order", "--json", dir)
	if code != ExitOK || !strings.Contains(out, `"x-run-id":"o2"`) {
		t.Errorf("dlq list order: exit %d, stderr %q\n%s", code, errOut, out)
	}
	// redrive resumes the run at the failed step (which fails it again here) and takes the
	// letter out; the run's history has the step's second visit.
	out, errOut, code = runCLI(t, "dlq", "redrive", "order", dir)
	if code != ExitOK || !strings.HasPrefix(out, "redrove 1 ") {
		t.Fatalf("dlq redrive order: exit %d, stderr %q\n%s", code, errOut, out)
	}
	ok = redistest.WaitFor(ctx, 15*time.Second, func() bool {
		out, _, _ := runCLI(t, "runs", "show", "order", "o2", "--json", dir)
		return strings.Count(out, `"outcome": "failed"`) == 2
	})
	if !ok {
		out, _, _ := runCLI(t, "runs", "show", "order", "o2", dir)
		t.Errorf("redriven run did not fail again:\n%s", out)
	}
}

// reloadWorkflow is a workflow whose second step holds its runs (a retry an hour away), for
// the reload tests; %s is reserve's next and what follows it.
const reloadWorkflow = `
redis "main" {
  url = %q
}

workflow "order" {
  run_id = "payload.order_id"

  start {
    source "stream" {
      stream = "orders"
    }
  }

  step "reserve" {
    rule "ok" {
      output = %q
    }
    %s
  }
}
`

const holdingStep = `next = "charge"
  }

  step "charge" {
    rule "hold" {
      when    = "input.sku == 'hold'"
      outcome = "retry_after('1h')"
    }
    rule "ok" {
      output = "'charged'"
    }`

// A reload that would remove a step where runs are active is refused, naming the step and the
// count (SPEC §16); one that changes a workflow restarts it, and new runs run the new one.
func TestReloadWorkflow(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "order.hcl")
	write := func(output, rest string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(fmt.Sprintf(reloadWorkflow, srv.URL, output, rest)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("'v1'", holdingStep)
	errs := startRun(t, "--log-level", "info", dir)
	c := srv.Client(t)
	ctx := context.Background()
	send := func(id, sku string) {
		t.Helper()
		b, _ := json.Marshal(map[string]string{"order_id": id, "sku": sku})
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "orders", Values: map[string]any{"payload": string(b)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	send("held", "hold")
	send("o1", "A1")
	waitRun(t, dir, "o1", "completed", errs)
	waitLog := func(what string) {
		t.Helper()
		if !redistest.WaitFor(ctx, 15*time.Second, func() bool { return strings.Contains(errs.String(), what) }) {
			t.Fatalf("no %q in run's stderr:\n%s", what, errs.String())
		}
	}
	// held is at charge: its message is held by the runtime, and the run is active there.
	if !redistest.WaitFor(ctx, 15*time.Second, func() bool { return c.HGet(ctx, "flowrun:{order}:active", "charge").Val() == "1" }) {
		t.Fatalf("held is not active at charge: %v", c.HGetAll(ctx, "flowrun:{order}:active").Val())
	}

	write("'v2'", "") // charge removed
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(`step \"charge\" is removed, but 1 runs are active there`)
	if strings.Contains(errs.String(), `"reloaded"`) {
		t.Fatalf("the refused reload applied:\n%s", errs.String())
	}

	write("'v2'", holdingStep) // a change that removes nothing
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(`"workflows_changed":["order"]`)
	send("o2", "A2")
	show := waitRun(t, dir, "o2", "completed", errs)
	if got := compact(t, show["steps"]); got != `{"charge":"charged","reserve":"v2"}` {
		t.Errorf("after the reload: steps %s", got)
	}

	// Removing the whole workflow removes charge too, where held still is: refused as well.
	refused := `step \"charge\" is removed, but 1 runs are active there`
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
redis "main" {
  url = %q
}

pipeline "other" {
  source "stream" {
    stream = "other"
  }
  rule "ok" {
    outcome = "ack"
  }
}
`, srv.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx, 15*time.Second, func() bool { return strings.Count(errs.String(), refused) >= 2 }) {
		t.Fatalf("removing the workflow with a run active was not refused:\n%s", errs.String())
	}
	if strings.Contains(errs.String(), `"workflows_removed":["order"]`) {
		t.Fatalf("the refused reload removed the workflow:\n%s", errs.String())
	}
	send("o3", "A3") // the workflow still runs (the files on disk no longer name it)
	if !redistest.WaitFor(ctx, 15*time.Second, func() bool { return c.HGet(ctx, "flowrun:{order}:run:o3", "status").Val() == "completed" }) {
		t.Fatalf("o3 did not complete after the refused reload: %v", c.HGetAll(ctx, "flowrun:{order}:run:o3").Val())
	}
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
