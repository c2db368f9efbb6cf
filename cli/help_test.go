package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(context.Background(), args, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	return out.String(), errb.String(), code
}

// Every command answers -h, --help and `help COMMAND` alike: usage, flags, an example, stdout, 0.
func TestHelpEveryCommand(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			var first string
			// For help itself: `help -h`, `help --help` and `help help`.
			for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
				out, errOut, code := runCLI(t, args...)
				if code != 0 || errOut != "" {
					t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
				}
				for _, want := range []string{"Usage: flowrun " + c.name, "Flags:", "--help", "Example:\n  "} {
					if !strings.Contains(out, want) {
						t.Errorf("%v: no %q in\n%s", args, want, out)
					}
				}
				if first == "" {
					first = out
				} else if out != first {
					t.Errorf("%v differs from the first form:\n%s\n---\n%s", args, out, first)
				}
			}
		})
	}
}

func TestHelpShowsFlagsWithDefaults(t *testing.T) {
	for _, tc := range []struct{ cmd, want string }{
		{"run", "--progress-interval DURATION\n        log a progress line per busy pipeline this often (0: never) (default 30s)"},
		{"run", "--log-level STRING"},
		{"validate", "--json\n"},
		{"fmt", "--check\n"},
		{"fmt", "--diff\n"},
		{"inspect", "--json\n"},
		{"dlq", "--limit INT"},
	} {
		out, _, _ := runCLI(t, "help", tc.cmd)
		if !strings.Contains(out, tc.want) {
			t.Errorf("help %s: no %q in\n%s", tc.cmd, tc.want, out)
		}
	}
}

func TestHelpListsCommands(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		out, _, code := runCLI(t, args...)
		if code != 0 {
			t.Errorf("%v: exit %d", args, code)
		}
		for _, c := range commands {
			if !strings.Contains(out, "\n  "+c.name+" ") {
				t.Errorf("%v: %s not listed in\n%s", args, c.name, out)
			}
		}
	}
}

func TestVersionFlag(t *testing.T) {
	want, _, _ := runCLI(t, "version")
	got, _, code := runCLI(t, "--version")
	if code != 0 || got != want || !strings.HasPrefix(got, "flowrun ") {
		t.Errorf("--version: exit %d, %q; version prints %q", code, got, want)
	}
}

func TestUnknownCommandOrFlagNamesTheClosest(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"valdate"}, `unknown command "valdate"; did you mean "validate"?`},
		{[]string{"inspcet"}, `did you mean "inspect"?`},
		{[]string{"help", "tset"}, `did you mean "test"?`},
		{[]string{"validate", "--jsn"}, `unknown flag --jsn; did you mean --json?`},
		{[]string{"run", "--log-levl", "x"}, `did you mean --log-level?`},
		{[]string{"fmt", "-chek"}, `did you mean --check?`},
		{[]string{"completion", "bsh"}, `did you mean "bash"?`},
	} {
		out, errOut, code := runCLI(t, tc.args...)
		if code != ExitConfig || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	_, errOut, _ := runCLI(t, "zzzzzz")
	if strings.Contains(errOut, "did you mean") {
		t.Errorf("a far-off name got a suggestion: %q", errOut)
	}
}

func TestClosest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"valdate", "validate"}, {"fmtt", "fmt"}, {"insp", "inspect"}, {"x", ""}, {"plugin", "plugins"}, {"qqqqq", ""},
	} {
		if got := closest(tc.in, commandNames()); got != tc.want {
			t.Errorf("closest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestValidateJSON(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.hcl")
	os.WriteFile(good, []byte("pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n"), 0o644)
	bad := filepath.Join(dir, "bad.hcl")
	os.WriteFile(bad, []byte("pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  rule \"r\" {\n    outcome = \"nope\"\n  }\n}\n"), 0o644)

	out, errOut, code := runCLI(t, "validate", "--json", good)
	if code != 0 || strings.TrimSpace(out) != "[]" || errOut != "" {
		t.Errorf("clean: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = runCLI(t, "validate", bad, "--json")
	var diags []map[string]any
	if err := json.Unmarshal([]byte(out), &diags); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if code != 1 || len(diags) == 0 {
		t.Fatalf("invalid: exit %d, %v", code, diags)
	}
	d := diags[0]
	if d["severity"] != "error" || d["file"] != bad || d["line"] != float64(5) || d["col"] == float64(0) || d["message"] == "" {
		t.Errorf("diagnostic %v", d)
	}

	// A file that is not there is at 1:1 of its path, as the text form prints it (docs/commands.md).
	missing := filepath.Join(dir, "missing.hcl")
	out, _, code = runCLI(t, "validate", "--json", missing)
	diags = nil
	if err := json.Unmarshal([]byte(out), &diags); err != nil || code != 1 || len(diags) != 1 {
		t.Fatalf("missing file: exit %d, %v (%v)", code, out, err)
	}
	if d := diags[0]; d["file"] != missing || d["line"] != float64(1) || d["col"] != float64(1) {
		t.Errorf("missing file: diagnostic %v, want %s at 1:1", d, missing)
	}
	_, text, _ := runCLI(t, "validate", missing)
	if !strings.HasPrefix(text, missing+":1:1: error: Cannot read configuration") {
		t.Errorf("missing file: text form %q", text)
	}
}

func TestUnifiedDiff(t *testing.T) {
	for _, tc := range []struct{ name, a, b, want string }{
		{"equal", "x\n", "x\n", ""},
		{"change", "a\nb\nc\n", "a\nB\nc\n", "--- f.orig\n+++ f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"add at end", "a\n", "a\nb\n", "--- f.orig\n+++ f\n@@ -1,1 +1,2 @@\n a\n+b\n"},
		{"from empty", "", "a\n", "--- f.orig\n+++ f\n@@ -0,0 +1,1 @@\n+a\n"},
		{"no final newline", "a", "a\n", "--- f.orig\n+++ f\n@@ -1,1 +1,1 @@\n-a\n\\ No newline at end of file\n+a\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", "0\n2\n3\n4\n5\n6\n7\n8\n9\nX\n",
			"--- f.orig\n+++ f\n@@ -1,4 +1,4 @@\n-1\n+0\n 2\n 3\n 4\n@@ -7,4 +7,4 @@\n 7\n 8\n 9\n-10\n+X\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			unifiedDiff(&b, "f.orig", "f", []byte(tc.a), []byte(tc.b))
			if b.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

func TestFmtDiffRewritesNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.hcl")
	src := "pipeline \"q\" {\nsource \"pipe\" {}\nout_retry=\"r\"\n  rule \"r\" { outcome = \"ack\" }\n}\n"
	os.WriteFile(p, []byte(src), 0o644)
	out, errOut, code := runCLI(t, "fmt", "-diff", p)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "\n-out_retry=\"r\"\n") || !strings.Contains(out, "\n+  out_retry = \"r\"\n") || !strings.HasPrefix(out, "--- "+p+".orig\n+++ "+p+"\n@@ ") {
		t.Errorf("diff:\n%s", out)
	}
	if got, _ := os.ReadFile(p); string(got) != src {
		t.Errorf("the file was rewritten:\n%s", got)
	}
	if _, _, code := runCLI(t, "fmt", "-diff", "-check", p); code != 1 {
		t.Errorf("-diff -check with a difference: exit %d, want 1", code)
	}
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := runCLI(t, "completion", shell)
		if code != 0 || errOut != "" {
			t.Fatalf("%s: exit %d, stderr %q", shell, code, errOut)
		}
		for _, want := range []string{"validate", "progress-interval", "json", "redrive"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in the script", shell, want)
			}
		}
	}
	if _, _, code := runCLI(t, "completion"); code != 1 {
		t.Errorf("no shell: exit %d, want 1", code)
	}
}
