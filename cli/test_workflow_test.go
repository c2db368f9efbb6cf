package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/plugins"
)

// clitest-wf-output is a Go handler for workflow steps: its output says what it saw (its
// payload, its idempotency key, its run, how many steps had finished).
func init() {
	type none struct{}
	plugins.Register(plugins.Spec[none]{
		Name: "clitest-wf-output",
		Provision: func(context.Context, none, plugins.Env) (plugins.Handler, error) {
			return plugins.HandlerFunc(func(_ context.Context, m plugins.Message, e *plugins.Emitter) (plugins.Outcome, error) {
				run, _ := m.Run()
				e.Output(map[string]any{"payload": json.RawMessage(m.Payload()), "key": m.Header("x-idempotency-key"),
					"run": m.Header("x-run-id"), "steps": len(run.Steps)})
				return plugins.Ack(), nil
			}), nil
		},
	})
}

// updateWorkflowGolden rewrites the golden files of the workflow tests:
// FLOWRUN_UPDATE_GOLDEN=1 go test ./cli -run TestWorkflowTests.
var updateWorkflowGolden = os.Getenv("FLOWRUN_UPDATE_GOLDEN") != ""

// `flowrun test` runs a workflow's tests offline (SPEC §16 "Tests"): mocks per call, retries
// up to max_attempts, compensations, timeouts on the test's clock, positioned FAIL lines.
func TestWorkflowTests(t *testing.T) {
	for _, tc := range []struct {
		file string
		code int
	}{
		{"order.hcl", ExitConfig}, // two tests fail on purpose
		{"bad.hcl", ExitConfig},
		{"gohandler.hcl", ExitOK},
		{"loops.hcl", ExitConfig},
		{"foreach.hcl", ExitConfig}, // one test fails on purpose
		{"waits.hcl", ExitConfig},   // one test fails on purpose
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "workflowtest", tc.file)
			var out, errb bytes.Buffer
			code := cmdTest(context.Background(), []string{path}, Stdio{Out: &out, Err: &errb})
			got := out.String() + errb.String()
			golden := strings.TrimSuffix(path, ".hcl") + ".golden"
			if updateWorkflowGolden {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || got != string(want) {
				t.Fatalf("exit %d (want %d), output:\n%s\nwant:\n%s", code, tc.code, got, want)
			}
		})
	}
}

// A file whose workflow tests all pass exits 0.
func TestWorkflowTestsPass(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "workflowtest", "order.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	// Keep the workflow and the tests that pass.
	s := string(src)
	for _, name := range []string{`test "wrong expectations"`, `test "a call without its mock"`} {
		i := strings.Index(s, name)
		j := strings.Index(s[i+1:], "\ntest \"")
		s = s[:i] + s[i+1+j+1:]
	}
	file := filepath.Join(t.TempDir(), "pass.hcl")
	if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := cmdTest(context.Background(), []string{file}, Stdio{Out: &out, Err: &errb})
	if code != ExitOK || !strings.HasSuffix(out.String(), "11 passed, 0 failed\n") || errb.Len() > 0 {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}
