package e2e

import (
	"strings"
	"testing"
)

// SPEC §12: validate reports a configuration that is valid but almost always a mistake as a
// positioned warning with its snippet and caret, prints ok and exits 0.
func TestValidateWarns(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "flow.hcl", `pipeline "p" {
  source "pipe" {}
  out_retry   = "again"
  dead_letter = "dlq"
  rule "r" {
    outcome = "retry"
  }
}
`)
	r := flowrun(t, "", "validate", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d, want 0 with a warning:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "ok: 1 pipelines") {
		t.Errorf("stdout %q", r.stdout)
	}
	want := cfg + ":6:15: warning: Retry without a cap loops at full speed: "
	if !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "    outcome = \"retry\"\n              ^~~~~~~") {
		t.Errorf("stderr:\n%s\nwant it to start %q, with the snippet and caret", r.stderr, want)
	}
	// run prints it too, and runs.
	r = flowrun(t, `{"key":"k","payload":1}`+"\n", "run", cfg)
	if r.code != 0 || !strings.Contains(r.stderr, "warning: Retry without a cap loops at full speed") {
		t.Errorf("run exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
