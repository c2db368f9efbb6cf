package cli_test

// A Go handler that emits to an emit kind registered outside flowrun (the "memory" kind of
// registry_test.go) with plugins.To: `flowrun run` writes to its sink, `flowrun test` checks it.

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/cli"
	"github.com/flowrun/flowrun/plugins"
	"github.com/flowrun/flowrun/registry"
)

func TestGoHandlerEmitsToRegisteredKind(t *testing.T) {
	t.Cleanup(registry.Snapshot()) // other tests list the handlers
	type none struct{}
	plugins.Register(plugins.Spec[none]{
		Name: "to-memory",
		Provision: func(context.Context, none, plugins.Env) (plugins.Handler, error) {
			return plugins.HandlerFunc(func(_ context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
				emit.Emit(plugins.To("memory", "seen"), m.Payload(), nil)
				return plugins.Ack(), nil
			}), nil
		},
	})
	path := writeHCL(t, `
pipeline "count" {
  source "sequence" {
    key   = "numbers"
    count = 2
  }
  handler "to-memory" {}
}

test "emits to memory" {
  pipeline = "count"
  message {
    payload = "1"
  }
  expect {
    outcome = "ack"
    emits   = [{ kind = "memory", key = "seen", payload = "1" }]
  }
}
`)
	if code, out, errs := runCLI(t, "test", path); code != cli.ExitOK {
		t.Fatalf("test: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	memory.reset()
	if code, _, errs := runCLI(t, "run", "--log-level", "error", path); code != cli.ExitOK {
		t.Fatalf("run: exit %d, stderr %q", code, errs)
	}
	got := memory.payloads()
	sort.Strings(got) // the two messages are handled concurrently: their emits come in either order
	if got := strings.Join(got, " "); got != "seen=1 seen=2" {
		t.Errorf("memory emits: %s", got)
	}
}
