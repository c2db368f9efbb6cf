package e2e

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// `flowrun test` runs pipelines with the built-in http and exec handlers against mocks, without
// sending a request or starting a process (SPEC §9).
func TestConfigTestHandlersWithMocks(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
	}))
	defer srv.Close()
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	writeFile(t, dir, "bin/charge", "#!/bin/sh\ntouch "+marker+"\n")
	if err := os.Chmod(filepath.Join(dir, "bin/charge"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, dir, "hooks.hcl", `pipeline "hook" {
  source "pipe" {}
  out_retry   = "hook.retry"
  dead_letter = "hook.dlq"
  handler "http" { url = "`+srv.URL+`" }
}

pipeline "charge" {
  source "pipe" {}
  out_retry   = "charge.retry"
  dead_letter = "charge.dlq"
  handler "exec" {
    command = ["./charge"]
    dir     = "bin"
  }
}

test "503 with Retry-After" {
  pipeline = "hook"
  message { payload = jsonencode({ id = 1 }) }
  mock {
    status  = 503
    headers = { "Retry-After" = "7" }
    body    = "busy"
  }
  expect {
    outcome   = "retry_after"
    min_delay = "5s"
    max_delay = "10s"
  }
}

test "503 with Retry-After, exactly" {
  pipeline = "hook"
  mock {
    status  = 503
    headers = { "Retry-After" = "7" }
  }
  expect { outcome = "retry_after('7s')" }
}

test "503 with Retry-After, too soon" {
  pipeline = "hook"
  mock {
    status  = 503
    headers = { "Retry-After" = "7" }
  }
  expect {
    outcome   = "retry_after"
    min_delay = "30s"
  }
}

test "200" {
  pipeline = "hook"
  mock { status = 200 }
  expect { outcome = "ack" }
}

test "400" {
  pipeline = "hook"
  mock {
    status = 400
    body   = jsonencode({ error = "no amount" })
  }
  expect {
    outcome = "dead_letter"
    reason  = "http 400 Bad Request: {\"error\":\"no amount\"}"
  }
}

test "exit 75" {
  pipeline = "charge"
  mock {
    exit   = 75
    stderr = "gateway busy"
  }
  expect { outcome = "retry" }
}

test "exit 2" {
  pipeline = "charge"
  mock {
    exit   = 2
    stderr = "starting\ncard declined\n"
  }
  expect {
    outcome = "dead_letter"
    reason  = "exec: exit status 2: card declined"
  }
}

test "exit 2 is not an ack" {
  pipeline = "charge"
  mock {
    exit   = 2
    stderr = "card declined"
  }
  expect { outcome = "ack" }
}
`)
	r := flowrun(t, "", "test", cfg)
	want := `PASS 503 with Retry-After
PASS 503 with Retry-After, exactly
FAIL 503 with Retry-After, too soon
  ` + cfg + `:48:3: outcome: got retry_after(7s) (handler "http", mock status 503), want retry_after with a delay of at least 30s
PASS 200
PASS 400
PASS exit 75
PASS exit 2
FAIL exit 2 is not an ack
  ` + cfg + `:99:3: outcome: got dead_letter("exec: exit status 2: card declined") (handler "exec", mock exit 2), want ack
6 passed, 2 failed
`
	if r.code != 1 || r.stdout != want || r.stderr != "" {
		t.Fatalf("exit %d, stdout:\n%s\nwant exit 1 and:\n%s\nstderr:\n%s", r.code, r.stdout, want, r.stderr)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("the mocked http handler sent %d requests", n)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the mocked exec handler ran its command")
	}
}

// A mock that does not fit is a configuration error, positioned, before any test runs.
func TestConfigTestMockMistakes(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "bad.hcl", `pipeline "hook" {
  source "pipe" {}
  out_retry = "again"
  handler "http" { url = "http://127.0.0.1:1/" }
}

pipeline "logged" {
  source "pipe" {}
  out_retry = "again"
  handler "log" {}
}

test "exit for http" {
  pipeline = "hook"
  mock { exit = 75 }
  expect { outcome = "retry" }
}

test "no mock" {
  pipeline = "hook"
  expect { outcome = "ack" }
}

test "log takes no mock" {
  pipeline = "logged"
  mock { status = 200 }
  expect {
    outcome   = "ack"
    max_delay = "1s"
  }
}
`)
	r := flowrun(t, "", "test", cfg)
	want := []string{
		cfg + `:15:10: error: Unsupported argument: "exit" mocks the process, for the exec handler. A mock for the http handler stands in for the HTTP response and takes "status", "headers" and "body".`,
		cfg + `:19:1: error: Missing mock block: Pipeline "hook" uses the http handler, which calls out; a test of it needs a mock block to stand in for what it calls, so that it runs without any connection or process.`,
		cfg + `:26:3: error: Unexpected mock block: Pipeline "logged" uses the Go handler "log", which cannot be mocked: a test runs it as compiled. Handlers that take a mock: "exec" and "http".`,
		cfg + `:29:5: error: Unsupported argument: "max_delay" bounds the delay of a retry_after outcome; this test expects "ack".`,
	}
	if got := errorLines(r.stderr); r.code != 1 || r.stdout != "" || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("exit %d, stdout %q, errors:\n%s\nwant:\n%s", r.code, r.stdout, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A user's own compiled handler is tested through the binary that has it: the tests of
// examples/custom/payouts.hcl, and a failing one.
func TestConfigTestCustomHandler(t *testing.T) {
	custom := filepath.Join(t.TempDir(), "payouts")
	if out, err := exec.Command("go", "build", "-o", custom, "../examples/custom").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/custom: %v\n%s", err, out)
	}
	run := func(args ...string) result {
		t.Helper()
		cmd := exec.Command(custom, args...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{stdout: out.String(), stderr: errb.String(), code: code}
	}

	r := run("test", "../examples/custom/payouts.hcl")
	want := "PASS a payout is paid and announced\nPASS a negative amount is dead-lettered\nPASS a payout waits while the gateway is down\n3 passed, 0 failed\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("exit %d, stdout:\n%s\nwant:\n%s\nstderr:\n%s", r.code, r.stdout, want, r.stderr)
	}

	dir := t.TempDir()
	cfg := writeFile(t, dir, "p.hcl", `pipeline "payouts" {
  source "pipe" {}
  out_retry = "again"
  handler "payout" {
    base = "1s"
    max  = "1m"
  }
}

test "gateway down, bounded too tightly" {
  pipeline = "payouts"
  message {
    payload = jsonencode({ id = 3, amount = 7 })
    headers = { gateway = "down" }
    attempt = 3
  }
  expect {
    outcome   = "retry_after"
    min_delay = "10m"
  }
}

test "zero amount" {
  pipeline = "payouts"
  message { payload = jsonencode({ id = 4, amount = 0 }) }
  expect {
    outcome = "dead_letter"
    reason  = "amount must be positive"
  }
}
`)
	r = run("test", cfg)
	lines := strings.Split(r.stdout, "\n")
	if r.code != 1 || len(lines) != 5 || lines[0] != "FAIL gateway down, bounded too tightly" ||
		!strings.HasPrefix(lines[1], "  "+cfg+`:17:3: outcome: got retry_after(`) ||
		!strings.HasSuffix(lines[1], `) (handler "payout"), want retry_after with a delay of at least 10m0s`) ||
		lines[2] != "PASS zero amount" || lines[3] != "1 passed, 1 failed" {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
