package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisrun"
	"github.com/flowrun/flowrun/workflow"
)

// runsWorkflow is a two-step workflow of rules, stopping on failure so that a failed run can be
// retried.
const runsWorkflow = `
redis "main" {
  url = %q
}

workflow "order" {
  on_failure = "stop"

  start {
    source "stream" {
      stream = "orders"
    }
  }

  step "reserve" {
    rule "ok" {
      output = "'reserved'"
    }
    next = "charge"
  }

  step "charge" {
    rule "ok" {
      output = "'charged'"
    }
  }
}
`

// runsEnv is a redis-server, a folder with runsWorkflow pointing at it, and the workflow's
// store there (to put runs where the commands find them).
type runsEnv struct {
	t     *testing.T
	dir   string
	store *redisrun.Store
	g     *workflow.Graph
}

func newRunsEnv(t *testing.T, url string) *runsEnv {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "order.hcl"), []byte(fmt.Sprintf(runsWorkflow, url)), 0o644); err != nil {
		t.Fatal(err)
	}
	return &runsEnv{t: t, dir: dir}
}

func (e *runsEnv) run(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	return runCLI(e.t, append(args, e.dir)...)
}

// keysOf are the keys of a JSON object, sorted.
func keysOf(t *testing.T, m map[string]json.RawMessage) []string {
	t.Helper()
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestRunsCommands(t *testing.T) {
	srv := redistest.Start(t)
	e := newRunsEnv(t, srv.URL)
	ctx := context.Background()

	// start: an id on stdout; --input must be JSON.
	if _, errOut, code := e.run("runs", "start", "order", "--input", "{"); code != ExitConfig || !strings.Contains(errOut, "not JSON") {
		t.Fatalf("start with bad input: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := e.run("runs", "start", "order", "--input", `{"sku":"A1"}`)
	if code != ExitOK {
		t.Fatalf("start: exit %d, stderr %q", code, errOut)
	}
	first := strings.TrimSpace(out)
	// The index orders runs by their start, in milliseconds: the next starts in a later one.
	for ms := time.Now().UnixMilli(); time.Now().UnixMilli() == ms; {
	}
	out, _, _ = e.run("runs", "start", "order", "--input", `"two"`)
	second := strings.TrimSpace(out)
	if first == "" || second == "" || first == second {
		t.Fatalf("ids %q and %q", first, second)
	}

	// list --json: newest first, exactly the keys of SPEC §16.
	out, errOut, code = e.run("runs", "list", "order", "--json")
	if code != ExitOK {
		t.Fatalf("list: exit %d, stderr %q", code, errOut)
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if len(list) != 2 {
		t.Fatalf("list: %d runs, want 2:\n%s", len(list), out)
	}
	if got := keysOf(t, list[0]); !slices.Equal(got, []string{"id", "started_at", "status", "step", "updated_at"}) {
		t.Errorf("list item keys %v", got)
	}
	if string(list[0]["id"]) != `"`+second+`"` || string(list[1]["id"]) != `"`+first+`"` {
		t.Errorf("list order: %s, %s; want %s then %s", list[0]["id"], list[1]["id"], second, first)
	}
	var started string
	json.Unmarshal(list[0]["started_at"], &started)
	if _, err := time.Parse(time.RFC3339, started); err != nil {
		t.Errorf("started_at %q: %v", started, err)
	}
	if string(list[0]["status"]) != `"running"` || string(list[0]["step"]) != `"reserve"` {
		t.Errorf("new run: status %s, step %s", list[0]["status"], list[0]["step"])
	}

	// show --json: exactly the keys of SPEC §16, the input as JSON, the history's entries.
	out, errOut, code = e.run("runs", "show", "order", first, "--json")
	if code != ExitOK {
		t.Fatalf("show: exit %d, stderr %q", code, errOut)
	}
	var show map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &show); err != nil {
		t.Fatalf("show --json: %v\n%s", err, out)
	}
	want := []string{"error", "history", "id", "input", "started_at", "status", "step", "steps", "updated_at", "workflow"}
	if got := keysOf(t, show); !slices.Equal(got, want) {
		t.Errorf("show keys %v, want %v", got, want)
	}
	if compact(t, show["input"]) != `{"sku":"A1"}` || string(show["workflow"]) != `"order"` || string(show["steps"]) != "{}" {
		t.Errorf("show: input %s, workflow %s, steps %s", show["input"], show["workflow"], show["steps"])
	}
	var hist []map[string]json.RawMessage
	if err := json.Unmarshal(show["history"], &hist); err != nil || len(hist) == 0 {
		t.Fatalf("history %s: %v", show["history"], err)
	}
	if got := keysOf(t, hist[0]); !slices.Equal(got, []string{"at", "attempt", "error", "outcome", "step", "visit"}) {
		t.Errorf("history entry keys %v", got)
	}
	if string(hist[0]["outcome"]) != `"started"` {
		t.Errorf("first history entry %v, want outcome started", hist[0])
	}

	// Human output.
	out, _, code = e.run("runs", "list", "order")
	if code != ExitOK || !strings.HasPrefix(out, "ID") || !strings.Contains(out, first) {
		t.Errorf("list table: exit %d\n%s", code, out)
	}
	out, _, code = e.run("runs", "show", "order", first)
	if code != ExitOK || !strings.Contains(out, "status:") || !strings.Contains(out, "history:") || !strings.Contains(out, "started") {
		t.Errorf("show block: exit %d\n%s", code, out)
	}

	// An unknown run is exit 1, for each subcommand that names one.
	for _, sub := range []string{"show", "cancel", "retry"} {
		if _, errOut, code := e.run("runs", sub, "order", "nope"); code != ExitConfig || !strings.Contains(errOut, `no run "nope"`) {
			t.Errorf("%s of an unknown run: exit %d, stderr %q", sub, code, errOut)
		}
	}

	// retry of a running run: exit 1; cancel it, then it is cancelled and cannot be retried.
	if _, errOut, code := e.run("runs", "retry", "order", first); code != ExitConfig || !strings.Contains(errOut, "not failed") {
		t.Errorf("retry of a running run: exit %d, stderr %q", code, errOut)
	}
	if _, errOut, code := e.run("runs", "cancel", "order", first); code != ExitOK {
		t.Fatalf("cancel: exit %d, stderr %q", code, errOut)
	}
	out, _, _ = e.run("runs", "list", "order", "--json", "--status", "cancelled")
	if !strings.Contains(out, first) || strings.Contains(out, second) {
		t.Errorf("list --status cancelled:\n%s", out)
	}
	if _, _, code := e.run("runs", "retry", "order", first); code != ExitConfig {
		t.Errorf("retry of a cancelled run: exit %d", code)
	}
	if _, _, code := e.run("runs", "cancel", "order", first); code != ExitConfig {
		t.Errorf("cancel of a cancelled run: exit %d", code)
	}

	// A failed run (on_failure = "stop": not compensated) resumes at its failed step.
	store, g := e.openStore(t, srv)
	st, err := store.Get(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := store.Apply(ctx, g.Fail(st, 3, "boom", time.Now())); !ok || err != nil {
		t.Fatalf("fail the run: %v %v", ok, err)
	}
	out, _, _ = e.run("runs", "show", "order", second, "--json")
	if err := json.Unmarshal([]byte(out), &show); err != nil || string(show["status"]) != `"failed"` || string(show["error"]) != `"boom"` {
		t.Fatalf("failed run: %v\n%s", err, out)
	}
	if out, errOut, code := e.run("runs", "retry", "order", second); code != ExitOK {
		t.Fatalf("retry: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, _ = e.run("runs", "show", "order", second, "--json")
	if err := json.Unmarshal([]byte(out), &show); err != nil || string(show["status"]) != `"running"` || string(show["step"]) != `"reserve"` {
		t.Errorf("retried run: %v\n%s", err, out)
	}
}

func (e *runsEnv) openStore(t *testing.T, srv *redistest.Server) (*redisrun.Store, *workflow.Graph) {
	cfg := loadConfig(t, fmt.Sprintf(runsWorkflow, srv.URL))
	g, err := graphOf(cfg.Workflow("order"))
	if err != nil {
		t.Fatal(err)
	}
	return redisrun.NewStore(srv.Client(t), g), g
}

// Usage errors and an unreachable Redis, as dlq's: 1 and 2.
func TestRunsExitCodes(t *testing.T) {
	e := newRunsEnv(t, "redis://127.0.0.1:1/0")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"runs"}, ExitConfig, "usage: flowrun runs"},
		{[]string{"runs", "lst"}, ExitConfig, `did you mean "list"`},
		{[]string{"runs", "start", "order"}, ExitConfig, "missing --input"},
		{[]string{"runs", "list", "order", "--status", "done"}, ExitConfig, "--status"},
		{[]string{"runs", "list", "ordr"}, ExitConfig, `did you mean "order"`},
		{[]string{"runs", "list", "order"}, ExitRuntime, `redis "main"`},
	} {
		_, errOut, code := e.run(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	if _, errOut, code := runCLI(t, "runs", "show", "order"); code != ExitConfig || !strings.Contains(errOut, "missing RUN") {
		t.Errorf("show without RUN: exit %d, stderr %q", code, errOut)
	}
}

func compact(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}
