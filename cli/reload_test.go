package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/rs/zerolog"
)

// A failed reload logs each diagnostic as one line with its position, as validate prints its
// first line.
func TestLogDiagnostics(t *testing.T) {
	var buf bytes.Buffer
	logDiagnostics(zerolog.New(&buf), hcl.Diagnostics{
		{Severity: hcl.DiagError, Summary: "Unclosed configuration block", Detail: "No closing brace.",
			Subject: &hcl.Range{Filename: "a.hcl", Start: hcl.Pos{Line: 3, Column: 7}}},
		{Severity: hcl.DiagWarning, Summary: "Retry loops at full speed"},
	})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	var first, second map[string]any
	json.Unmarshal([]byte(lines[0]), &first)
	json.Unmarshal([]byte(lines[1]), &second)
	if first["level"] != "error" || first["message"] != "a.hcl:3:7: error: Unclosed configuration block: No closing brace." ||
		first["file"] != "a.hcl" || first["line"] != 3.0 || first["col"] != 7.0 {
		t.Errorf("error line: %v", first)
	}
	if second["level"] != "warn" || second["message"] != "warning: Retry loops at full speed" {
		t.Errorf("warning line: %v", second)
	}
}
