package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// fmt is all or nothing (SPEC §1): a file that does not parse is reported with its position, the
// exit code is 1, and no file is touched, not even a valid one named with it.
func TestFmtNeverRewritesAFileThatDoesNotParse(t *testing.T) {
	dir := t.TempDir()
	// `rule "r"` without its brace: hclwrite would re-indent the body and move the closing braces.
	brokenSrc := "pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  rule \"r\"\n    outcome = \"ack\"\n  }\n}\n"
	uglySrc := "pipeline \"q\" {\nsource \"pipe\" {}\nout_retry=\"r\"\n  rule \"r\" { outcome = \"ack\" }\n}\n"
	broken := writeFile(t, dir, "a_broken.hcl", brokenSrc)
	ugly := writeFile(t, dir, "b_ugly.hcl", uglySrc)
	before := map[string]os.FileInfo{}
	for _, p := range []string{broken, ugly} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = st
	}
	untouched := func(when string) {
		t.Helper()
		for p, want := range map[string]string{broken: brokenSrc, ugly: uglySrc} {
			if got := readFile(t, p); got != want {
				t.Errorf("%s: %s was changed:\n%s", when, p, got)
			}
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if !st.ModTime().Equal(before[p].ModTime()) || !os.SameFile(st, before[p]) {
				t.Errorf("%s: %s was rewritten", when, p)
			}
		}
	}
	diag := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(broken) + `:4:\d+: error: `)

	for _, args := range [][]string{
		{"fmt", dir},
		{"fmt", ugly, broken},
		{"fmt", "-check", dir},
	} {
		r := flowrun(t, "", args...)
		if r.code != 1 {
			t.Errorf("%v: exit %d, want 1", args, r.code)
		}
		if !diag.MatchString(r.stderr) {
			t.Errorf("%v: stderr does not report the syntax error at %s:4:\n%s", args, broken, r.stderr)
		}
		if !strings.Contains(r.stderr, `rule "r"`) {
			t.Errorf("%v: stderr has no snippet of the offending line:\n%s", args, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("%v: stdout %q, want nothing (no file listed as changed)", args, r.stdout)
		}
		untouched(strings.Join(args[:len(args)-1], " "))
	}

	// Once the error is fixed, both are formatted.
	writeFile(t, dir, "a_broken.hcl", strings.Replace(brokenSrc, "rule \"r\"\n", "rule \"r\" {\n", 1))
	r := flowrun(t, "", "fmt", dir)
	if r.code != 0 {
		t.Fatalf("fmt after the fix: exit %d\n%s", r.code, r.stderr)
	}
	if got := readFile(t, ugly); !strings.Contains(got, "  out_retry = \"r\"\n") {
		t.Errorf("b_ugly.hcl not formatted:\n%s", got)
	}
	if r := flowrun(t, "", "fmt", "-check", dir); r.code != 0 || r.stdout != "" {
		t.Errorf("fmt -check after fmt: exit %d stdout %q stderr %s", r.code, r.stdout, r.stderr)
	}
	if r := flowrun(t, "", "validate", dir); r.code != 0 {
		t.Errorf("validate after fmt: exit %d\n%s", r.code, r.stderr)
	}
}
