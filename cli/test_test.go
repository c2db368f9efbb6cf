package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/plugins"
)

// Handlers that the tests below run as compiled: what a user's own handler may do.
func init() {
	type none struct{}
	handler := func(name string, h plugins.HandlerFunc) {
		plugins.Register(plugins.Spec[none]{
			Name: name,
			Provision: func(context.Context, none, plugins.Env) (plugins.Handler, error) {
				return h, nil
			},
		})
	}
	handler("clitest-panics", func(context.Context, plugins.Message, *plugins.Emitter) (plugins.Outcome, error) {
		panic("boom")
	})
	handler("clitest-fails", func(context.Context, plugins.Message, *plugins.Emitter) (plugins.Outcome, error) {
		return plugins.Retry(), errors.New("gateway: connection refused")
	})
	handler("clitest-emits", func(_ context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
		emit.Emit(plugins.ToRecord("done"), m.Payload(), nil)
		emit.Emit(plugins.ToStream("audit"), []byte(m.Header("who")), nil)
		return plugins.Ack(), nil
	})
}

// testPipelines is one file of pipelines: rules, the http and exec handlers (whose endpoint and
// program do not exist, so only a mock can answer) and handlers of the tests' own.
const testPipelines = `
pipeline "rules" {
  source "pipe" {}
  out_retry = "again"
  rule "later" {
    when    = "payload.later ?? false"
    outcome = "retry_after(backoff('1s', '2s'))"
  }
}

pipeline "hook" {
  source "pipe" {}
  out_retry = "again"
  handler "http" { url = "http://127.0.0.1:1/hook" }
}

pipeline "charge" {
  source "pipe" {}
  out_retry = "again"
  handler "exec" {
    command     = ["./no-such-program"]
    emit_stdout = "charges.done"
  }
}

pipeline "panics" {
  source "pipe" {}
  out_retry = "again"
  handler "clitest-panics" {}
}

pipeline "fails" {
  source "pipe" {}
  out_retry = "again"
  handler "clitest-fails" {}
}

pipeline "emits" {
  source "pipe" {}
  out_retry = "again"
  handler "clitest-emits" {}
}

pipeline "onekey" {
  source "pipe" {}
  out_retry = "again"
  concurrency_key {
    key   = "payload.customer"
    limit = 1
  }
  rule "ok" { outcome = "ack" }
}

pipeline "keys" {
  source "pipe" {}
  out_retry = "again"
  concurrency_key {
    key   = "payload.customer"
    limit = 1
  }
  throttle {
    limit  = 5
    period = "1s"
    key    = "headers['tenant']"
  }
  dedupe {
    key    = "payload.id"
    window = "1h"
  }
  rule "ok" { outcome = "ack" }
}
`

func TestCmdTest(t *testing.T) {
	tests := []struct {
		name, test string
		out        string // after PASS or FAIL NAME: the problems, each "  FILE:LINE:COL: " + this
	}{
		{name: "rules, any delay within bounds", test: `
  pipeline = "rules"
  message { payload = jsonencode({ later = true }) }
  expect {
    outcome   = "retry_after"
    max_delay = "1s"
  }`},
		{name: "rules, below min_delay", test: `
  pipeline = "rules"
  message { payload = jsonencode({ later = true }) }
  expect {
    outcome   = "retry_after"
    min_delay = "1h"
  }`, out: `outcome: got retry_after(*) (rule "later"), want retry_after with a delay of at least 1h0m0s`},
		{name: "http 503 with Retry-After, bounded", test: `
  pipeline = "hook"
  mock {
    status  = 503
    headers = { "Retry-After" = "7" }
  }
  expect {
    outcome   = "retry_after"
    min_delay = "5s"
    max_delay = "10s"
  }`},
		{name: "http 503 with Retry-After, exactly", test: `
  pipeline = "hook"
  mock {
    status  = 503
    headers = { "Retry-After" = "7" }
  }
  expect { outcome = "retry_after('7s')" }`},
		{name: "http 503 with Retry-After, out of bounds", test: `
  pipeline = "hook"
  mock {
    status  = 503
    headers = { "Retry-After" = "7" }
  }
  expect {
    outcome   = "retry_after"
    min_delay = "10s"
    max_delay = "20s"
  }`, out: `outcome: got retry_after(7s) (handler "http", mock status 503), want retry_after with a delay of 10s to 20s`},
		{name: "http 200", test: `
  pipeline = "hook"
  mock { status = 200 }
  expect { outcome = "ack" }`},
		{name: "http 400", test: `
  pipeline = "hook"
  mock {
    status = 400
    body   = jsonencode({ error = "no amount" })
  }
  expect {
    outcome = "dead_letter"
    reason  = "http 400 Bad Request"
  }`},
		{name: "http 400, another reason", test: `
  pipeline = "hook"
  mock { status = 400 }
  expect {
    outcome = "dead_letter"
    reason  = "http 404"
  }`, out: `outcome: got dead_letter("http 400 Bad Request") (handler "http", mock status 400), want dead_letter with a reason containing "http 404"`},
		{name: "http 400, not an ack", test: `
  pipeline = "hook"
  mock { status = 400 }
  expect { outcome = "ack" }`, out: `outcome: got dead_letter("http 400 Bad Request") (handler "http", mock status 400), want ack`},
		{name: "exec exit 75", test: `
  pipeline = "charge"
  mock {
    exit   = 75
    stderr = "gateway busy"
  }
  expect { outcome = "retry" }`},
		{name: "exec exit 2", test: `
  pipeline = "charge"
  mock {
    exit   = 2
    stderr = "starting\ncard declined"
  }
  expect {
    outcome = "dead_letter"
    reason  = "exec: exit status 2: card declined"
  }`},
		{name: "exec stdout emitted", test: `
  pipeline = "charge"
  mock { stdout = "ch_1\nch_2\n" }
  expect {
    outcome = "ack"
    emits = [
      { kind = "record", key = "charges.done", payload = "ch_1" },
      { kind = "record", key = "charges.done", payload = "ch_2" },
    ]
  }`},
		{name: "own handler emits", test: `
  pipeline = "emits"
  message {
    payload = jsonencode({ id = 1 })
    headers = { who = "me" }
  }
  expect {
    outcome = "ack"
    emits = [
      { kind = "record", key = "done", payload = { id = 1 } },
      { kind = "stream", key = "audit", payload = "you" },
    ]
  }`, out: `emit 2 payload: got me, want you`},
		{name: "own handler's error with the retry expected", test: `
  pipeline = "fails"
  expect { outcome = "retry" }`},
		{name: "own handler's error shown when the outcome differs", test: `
  pipeline = "fails"
  expect { outcome = "ack" }`, out: `outcome: got retry (handler "clitest-fails"; error: gateway: connection refused), want ack`},
		{name: "own handler panics", test: `
  pipeline = "panics"
  expect { outcome = "ack" }`, out: `handler "clitest-panics" panicked: boom`},
		{name: "the only flow-control key", test: `
  pipeline = "onekey"
  message { payload = jsonencode({ customer = "c-1" }) }
  expect { key = "c-1" }`},
		{name: "the only flow-control key differs", test: `
  pipeline = "onekey"
  message { payload = jsonencode({ customer = "c-1" }) }
  expect {
    outcome = "ack"
    key     = "c-2"
  }`, out: `key: got "c-1", want "c-2"`},
		{name: "each flow-control key", test: `
  pipeline = "keys"
  message {
    payload = jsonencode({ customer = "c-1", id = 7 })
    headers = { tenant = "acme" }
  }
  expect {
    concurrency_key = "c-1"
    throttle_key    = "acme"
    dedupe_key      = "7"
  }`},
		{name: "a flow-control key that fails", test: `
  pipeline = "keys"
  message { payload = jsonencode({ id = 7 }) }
  expect { concurrency_key = "c-1" }`, out: `concurrency_key: the key expression failed: key expression gave nil`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "t.hcl")
			src := testPipelines + "\ntest \"" + tt.name + "\" {" + tt.test + "\n}\n"
			if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := cmdTest(context.Background(), []string{file}, Stdio{Out: &out, Err: &errb})
			want, wantCode := "PASS "+tt.name+"\n1 passed, 0 failed\n", ExitOK
			if tt.out != "" {
				line := strings.Count(src[:strings.LastIndex(src, "expect")], "\n") + 1
				want = "FAIL " + tt.name + "\n  " + file + ":" + strconv.Itoa(line) + ":3: " + tt.out + "\n0 passed, 1 failed\n"
				wantCode = ExitConfig
			}
			got := out.String()
			if i := strings.Index(tt.out, "(*)"); i >= 0 { // a random delay
				got = replaceBetween(got, tt.out[:i+1], ")")
			}
			if code != wantCode || got != want || errb.Len() > 0 {
				t.Fatalf("exit %d, stdout:\n%s\nwant exit %d:\n%s\nstderr:\n%s", code, got, wantCode, want, errb.String())
			}
		})
	}
}

// replaceBetween replaces what follows the first prefix in s, up to the next end, with "*".
func replaceBetween(s, prefix, end string) string {
	i := strings.Index(s, prefix)
	if i < 0 {
		return s
	}
	i += len(prefix)
	j := strings.Index(s[i:], end)
	if j < 0 {
		return s
	}
	return s[:i] + "*" + s[i+j:]
}
