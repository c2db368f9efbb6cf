package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestValidateReportsEveryMistakeWithPosition(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.hcl", `pipeline "orders" {
  source "stream" {
    stream   = "orders"
    min_idle = "30s"
  }
  rule "big" {
    when    = "payload.amount > 10000 && paylod.x"
    outcome = "drop"
  }
}
`)
	writeFile(t, dir, "b.hcl", `pipeline "events" {
  source "pipe" {}
  concurency = 4
  rule "r" {
    outcome = "retry"
  }
}

pipeline "orders" {
  source "file" {
    path = "x.jsonl"
  }
  handler "lgo" {}
}
`)
	r := flowrun(t, "", "validate", dir)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	a, b := filepath.Join(dir, "a.hcl"), filepath.Join(dir, "b.hcl")
	lines := errorLines(r.stderr)
	want := []struct{ prefix, text string }{
		{a + ":2:3: error: ", "no redis block"},                  // a Redis source with no redis block
		{a + ":4:5: error: ", "min_idle"},                        // min_idle on a plain stream
		{a + ":7:42: error: ", `unknown name "paylod"`},          // inside the string
		{b + ":1:1: error: ", "out_retry"},                       // the pipeline lacking out_retry
		{b + ":3:3: error: ", `Did you mean "concurrency"?`},     // a near name
		{b + ":9:1: error: ", "already declared at " + a + ":1"}, // a duplicate across files
		{b + ":13:11: error: ", `Did you mean "log"?`},           // an unknown Go handler
	}
	if len(lines) != len(want) {
		t.Errorf("%d errors, want %d (every problem at once):\n%s", len(lines), len(want), r.stderr)
	}
	for i, w := range want {
		if i >= len(lines) || !strings.HasPrefix(lines[i], w.prefix) || !strings.Contains(lines[i], w.text) {
			t.Errorf("error %d: want %q…%q in:\n%s", i+1, w.prefix, w.text, r.stderr)
		}
	}
	// Every problem has its snippet and caret.
	if got := strings.Count(r.stderr, "^"); got < len(lines) {
		t.Errorf("%d carets for %d errors:\n%s", got, len(lines), r.stderr)
	}
}

var errorLine = regexp.MustCompile(`(?m)^\S+:\d+:\d+: error: .*$`)

func errorLines(stderr string) []string { return errorLine.FindAllString(stderr, -1) }

func TestValidateExamples(t *testing.T) {
	r := flowrun(t, "", "validate", "../examples")
	if r.code != 0 || r.stdout != "ok: 9 pipelines, 2 workflows\n" {
		t.Fatalf("exit %d stdout %q stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	r = flowrun(t, "", "test", "../examples")
	if r.code != 0 || !strings.HasSuffix(r.stdout, " passed, 0 failed\n") || strings.Contains(r.stdout, "FAIL") {
		t.Fatalf("flowrun test examples: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = flowrun(t, "", "fmt", "-check", "../examples")
	if r.code != 0 {
		t.Fatalf("examples are not in canonical layout: %s", r.stdout)
	}
}

func TestQuickstart(t *testing.T) {
	r := flowrun(t, "", "run", "../examples/quickstart.hcl")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	want := `{"key":"orders.accepted","headers":{"customer":"c-17"},"payload":{"amount":120,"currency":"EUR","id":1}}
{"key":"orders.review","headers":{"reason":"amount over 10000"},"payload":{"id":2,"amount":25000,"currency":"EUR"}}
{"key":"orders.accepted","headers":{"customer":"c-09"},"payload":{"amount":75.5,"currency":"USD","id":5}}
`
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	if !strings.Contains(r.stderr, `"line":5`) {
		t.Errorf("the malformed line 5 is not logged with its number:\n%s", r.stderr)
	}
}

const pipeConfig = `pipeline "events" {
  source "pipe" {
    key = "events"
  }
  concurrency = 1
  out_retry   = "events.retry"

  rule "welcome" {
    when = "payload.type == 'signup'"
    emit "record" {
      key     = "emails"
      payload = "{'to': payload.user}"
    }
    outcome = "ack"
  }
  rule "later" {
    when    = "payload.type == 'later'"
    outcome = "retry_after(headers['delay'] ?? '50ms')"
  }
  otherwise = "drop"
}
`

func TestPipeWritesExactlyTheExpectedRecords(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pipe.hcl", pipeConfig)
	in := `{"key":"events","payload":{"type":"signup","user":"ada"}}
{"key":"other","payload":{"type":"signup","user":"bob"}}
not json at all
{"key":"events","payload":{"type":"noise"}}
{"key":"events","headers":{"h":"1"},"payload":{"type":"later"}}
`
	r := flowrun(t, in, "run", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	want := `{"key":"emails","payload":{"to":"ada"}}
{"key":"events.retry","headers":{"h":"1","x-retry-count":"1"},"payload":{"type":"later"}}
`
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	if !strings.Contains(r.stderr, `"line":3`) {
		t.Errorf("malformed line 3 not logged with its number:\n%s", r.stderr)
	}
}

func TestFileReplayAppendsRetryCopy(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "data.jsonl", `{"key":"jobs","payload":{"n":1}}`+"\n")
	cfg := writeFile(t, dir, "replay.hcl", `pipeline "jobs" {
  source "file" {
    path = "data.jsonl"
  }
  rule "first-try-later" {
    when    = "attempt == 1"
    outcome = "retry_after('100ms')"
  }
}
`)
	start := time.Now()
	r := flowrun(t, "", "run", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("exited after %v, before the copy was due", el)
	}
	want := `{"key":"jobs","payload":{"n":1}}
{"key":"jobs","headers":{"x-retry-count":"1"},"payload":{"n":1}}
`
	if got := readFile(t, data); got != want {
		t.Errorf("file:\n%s\nwant:\n%s", got, want)
	}
}

func TestSIGTERMPublishesHeldCopies(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pipe.hcl", pipeConfig)
	p := start(t, "run", "--log-level", "debug", cfg)
	if _, err := p.stdin.Write([]byte(`{"key":"events","headers":{"delay":"1h"},"payload":{"type":"later"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the delivery to be settled", func() bool {
		return strings.Contains(p.err.String(), `"outcome":"retry_after"`)
	})
	if p.out.String() != "" {
		t.Fatalf("copy written before it was due: %s", p.out.String())
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM; stderr:\n%s", code, p.err.String())
	}
	want := `{"key":"events.retry","headers":{"delay":"1h","x-retry-count":"1"},"payload":{"type":"later"}}` + "\n"
	if got := p.out.String(); got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
}

func TestFileCheckpointResumesAfterSettled(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "in.jsonl", `{"key":"k","payload":1}
{"key":"k","payload":2}
{"key":"k","payload":3}
`)
	cfg := writeFile(t, dir, "cp.hcl", `pipeline "cp" {
  source "file" {
    path       = "in.jsonl"
    checkpoint = "in.checkpoint"
  }
  rule "echo" {
    emit "record" { key = "seen" }
    outcome = "ack"
  }
}
`)
	r := flowrun(t, "", "run", cfg)
	if r.code != 0 || strings.Count(r.stdout, `"key":"seen"`) != 3 {
		t.Fatalf("first run: exit %d stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	f, err := os.OpenFile(data, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"key":"k","payload":4}` + "\n")
	f.Close()
	r = flowrun(t, "", "run", cfg)
	if r.code != 0 || r.stdout != `{"key":"seen","payload":4}`+"\n" {
		t.Fatalf("second run handled settled records again or missed the new one: exit %d stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestRunRefusesBadConfigAndStartsNothing(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "p.hcl", `pipeline "p" {
  source "pipe" {}
  rule "r" { outcome = "ack" }
}
`)
	r := flowrun(t, `{"key":"a","payload":1}`+"\n", "run", cfg)
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("exit %d stdout %q, want 1 and nothing", r.code, r.stdout)
	}
	if !regexp.MustCompile(`p\.hcl:1:1: error: .*out_retry`).MatchString(r.stderr) {
		t.Errorf("stderr does not point at the pipe block lacking out_retry:\n%s", r.stderr)
	}
}

func TestFmt(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "ugly.hcl", "pipeline \"p\" {\nsource \"pipe\" {}\nout_retry=\"r\"\n  rule \"r\" { outcome = \"ack\" }\n}\n")
	r := flowrun(t, "", "fmt", "-check", dir)
	if r.code != 1 || r.stdout != path+"\n" {
		t.Fatalf("fmt -check: exit %d stdout %q", r.code, r.stdout)
	}
	if r = flowrun(t, "", "fmt", dir); r.code != 0 {
		t.Fatalf("fmt: exit %d %s", r.code, r.stderr)
	}
	if got := readFile(t, path); !strings.Contains(got, "  out_retry = \"r\"\n") {
		t.Errorf("not reformatted:\n%s", got)
	}
	if r = flowrun(t, "", "fmt", "-check", dir); r.code != 0 || r.stdout != "" {
		t.Fatalf("fmt -check after fmt: exit %d stdout %q", r.code, r.stdout)
	}
}

func TestPluginsAndVersion(t *testing.T) {
	r := flowrun(t, "", "plugins")
	if r.code != 0 || !regexp.MustCompile(`(?m)^log\s`).MatchString(r.stdout) {
		t.Fatalf("plugins: exit %d %q", r.code, r.stdout)
	}
	r = flowrun(t, "", "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "flowrun ") || !strings.Contains(r.stdout, "\ngo ") || !strings.Contains(r.stdout, "\ncommit ") {
		t.Fatalf("version: exit %d %q", r.code, r.stdout)
	}
}
