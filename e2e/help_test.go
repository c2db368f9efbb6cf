package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// SPEC §1: every command answers -h, --help and `flowrun help COMMAND` on stdout, exit 0, with
// its usage, flags and an example.
func TestHelpPerCommand(t *testing.T) {
	for _, cmd := range []string{"run", "validate", "fmt", "test", "inspect", "dlq", "plugins", "version", "completion"} {
		for _, args := range [][]string{{cmd, "-h"}, {cmd, "--help"}, {"help", cmd}} {
			r := flowrun(t, "", args...)
			if r.code != 0 || r.stderr != "" {
				t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
			}
			for _, want := range []string{"Usage: flowrun " + cmd, "Flags:", "Example:"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("%v: no %q on stdout:\n%s", args, want, r.stdout)
				}
			}
		}
	}
	r := flowrun(t, "", "run", "--help")
	if !strings.Contains(r.stdout, "--progress-interval DURATION") || !strings.Contains(r.stdout, "(default 30s)") {
		t.Errorf("run --help lacks a flag with its default:\n%s", r.stdout)
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := flowrun(t, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "  validate ") || !strings.Contains(r.stdout, "  dlq ") {
			t.Errorf("%v: exit %d, stdout:\n%s", args, r.code, r.stdout)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	a, b := flowrun(t, "", "--version"), flowrun(t, "", "version")
	if a.code != 0 || a.stdout != b.stdout || !strings.HasPrefix(a.stdout, "flowrun ") {
		t.Errorf("--version: exit %d %q; version: %q", a.code, a.stdout, b.stdout)
	}
}

func TestHelpNamesTheClosestCommandOrFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"valdate"}, `unknown command "valdate"; did you mean "validate"?`},
		{[]string{"validate", "--jsn"}, `did you mean --json?`},
		{[]string{"fmt", "--dif"}, `did you mean --diff?`},
	} {
		r := flowrun(t, "", tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestValidateJSON(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.hcl", "pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n")
	r := flowrun(t, "", "validate", "--json", good)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("clean: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	bad := writeFile(t, t.TempDir(), "bad.hcl", "pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  rule \"r\" {\n    when    = \"paylod.x > 1\"\n    outcome = \"ack\"\n  }\n}\n")
	r = flowrun(t, "", "validate", "--json", bad)
	var diags []struct {
		Severity, File, Message string
		Line, Col               int
	}
	if err := json.Unmarshal([]byte(r.stdout), &diags); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, r.stdout)
	}
	if r.code != 1 || len(diags) == 0 {
		t.Fatalf("invalid: exit %d, %+v", r.code, diags)
	}
	if d := diags[0]; d.Severity != "error" || d.File != bad || d.Line != 5 || d.Col < 16 || !strings.Contains(d.Message, "paylod") {
		t.Errorf("diagnostic %+v", d)
	}
}

func TestFmtDiff(t *testing.T) {
	dir := t.TempDir()
	src := "pipeline \"q\" {\nsource \"pipe\" {}\nout_retry=\"r\"\n  rule \"r\" { outcome = \"ack\" }\n}\n"
	p := writeFile(t, dir, "a.hcl", src)
	r := flowrun(t, "", "fmt", "-diff", p)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "--- "+p+".orig\n+++ "+p+"\n@@ -1,5 +1,5 @@\n") ||
		!strings.Contains(r.stdout, "\n-out_retry=\"r\"\n") || !strings.Contains(r.stdout, "\n+  out_retry = \"r\"\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if got := readFile(t, p); got != src {
		t.Errorf("fmt -diff rewrote the file:\n%s", got)
	}
	if r := flowrun(t, "", "fmt", "-diff", "-check", p); r.code != 1 {
		t.Errorf("-diff -check: exit %d, want 1", r.code)
	}
}

func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := flowrun(t, "", "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "validate") || !strings.Contains(r.stdout, "log-level") {
			t.Errorf("%s: exit %d, stdout:\n%s", shell, r.code, r.stdout)
		}
	}
}
