package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// A schedule reads no key: its pipeline's source is a node of its own, not a key named like the
// pipeline.
func TestGraphSchedule(t *testing.T) {
	path := filepath.Join(t.TempDir(), "graph.hcl")
	body := `pipeline "nightly" {
  source "schedule" {
    cron = "0 2 * * *"
  }
  rule "r" {
    emit "record" {
      key = "reports"
    }
    outcome = "ack"
  }
}
`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	want := `flowchart LR
  p_nightly["nightly"]
  r_reports[("reports (records)")]
  s_nightly[("schedule")]
  s_nightly -->|"schedule"| p_nightly
  p_nightly -->|"emit record"| r_reports
`
	out, errOut, code := runCLI(t, "graph", path)
	if code != 0 || errOut != "" || out != want {
		t.Errorf("code %d, stderr %q, got:\n%s\nwant:\n%s", code, errOut, out, want)
	}
}
