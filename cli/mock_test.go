package cli_test

// A Go handler registered outside flowrun declares its own mock block (plugins.MockSpec):
// `flowrun test` decodes it with positions, hands it to the handler's Provision and runs the
// handler's real logic on what it answers.

import (
	"context"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/cli"
	"github.com/flowrun/flowrun/plugins"
	"github.com/flowrun/flowrun/registry"
)

type quoteConfig struct {
	Service string `hcl:"service"`
}

// quoteMock is what the quote service would answer.
type quoteMock struct {
	Price int `hcl:"price"`
}

func registerQuote(t *testing.T) {
	t.Helper()
	t.Cleanup(registry.Snapshot()) // other tests list the handlers
	plugins.Register(plugins.Spec[quoteConfig]{
		Name: "quote",
		Mock: plugins.MockSpec[quoteMock]{
			Validate: func(m quoteMock, b plugins.Block) error {
				if m.Price < 0 {
					return b.Errorf("price", "Invalid value", "A price is never negative.")
				}
				return nil
			},
		},
		Provision: func(_ context.Context, c quoteConfig, env plugins.Env) (plugins.Handler, error) {
			m, ok := env.Mock.(quoteMock)
			if !ok {
				m.Price = -1 // the real service is never reached in these tests
			}
			return plugins.HandlerFunc(func(context.Context, plugins.Message, *plugins.Emitter) (plugins.Outcome, error) {
				switch {
				case m.Price < 0:
					return plugins.DeadLetter("no quote service at " + c.Service), nil
				case m.Price > 100:
					return plugins.Drop(), nil
				}
				return plugins.Ack(), nil
			}), nil
		},
	})
}

func TestFlowrunTestUsesCustomMock(t *testing.T) {
	registerQuote(t)
	path := writeHCL(t, `
pipeline "quotes" {
  source "pipe" {}
  out_retry = "again"
  handler "quote" { service = "https://quotes.example" }
}

test "cheap" {
  pipeline = "quotes"
  mock { price = 5 }
  expect { outcome = "ack" }
}

test "dear" {
  pipeline = "quotes"
  mock { price = 500 }
  expect { outcome = "drop" }
}

test "wrong" {
  pipeline = "quotes"
  mock { price = 7 }
  expect { outcome = "drop" }
}
`)
	code, out, errs := runCLI(t, "test", path)
	if code != cli.ExitConfig || !strings.Contains(out, "PASS cheap\nPASS dear\nFAIL wrong\n") ||
		!strings.Contains(out, "2 passed, 1 failed") || !strings.Contains(out, "mock {7}") {
		t.Errorf("test: exit %d, stdout:\n%s\nstderr: %s", code, out, errs)
	}
}

func TestCustomMockDiagnostics(t *testing.T) {
	registerQuote(t)
	path := writeHCL(t, `
pipeline "quotes" {
  source "pipe" {}
  out_retry = "again"
  handler "quote" { service = "https://quotes.example" }
}

test "misspelt" {
  pipeline = "quotes"
  mock { prise = 5 }
  expect { outcome = "ack" }
}

test "negative" {
  pipeline = "quotes"
  mock { price = -5 }
  expect { outcome = "ack" }
}

test "none" {
  pipeline = "quotes"
  expect { outcome = "ack" }
}
`)
	code, _, errs := runCLI(t, "validate", path)
	for _, want := range []string{
		path + `:10:10: error: Unsupported argument: An argument named "prise" is not expected here. Did you mean "price"?`,
		path + `:16:18: error: Invalid value: A price is never negative.`,
		path + `:20:1: error: Missing mock block: Pipeline "quotes" uses the quote handler, which calls out;`,
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("validate: missing %q in:\n%s", want, errs)
		}
	}
	if code != cli.ExitConfig {
		t.Errorf("validate: exit %d", code)
	}
}
