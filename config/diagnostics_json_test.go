package config

import (
	"bytes"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

func TestWriteDiagnosticsJSON(t *testing.T) {
	for _, tc := range []struct {
		name  string
		diags hcl.Diagnostics
		want  string
	}{
		{"none", nil, "[]\n"},
		{"positioned error and warning, and one without a subject", hcl.Diagnostics{
			{Severity: hcl.DiagError, Summary: "Invalid rule", Detail: `unknown name "paylod"`,
				Subject: &hcl.Range{Filename: "a.hcl", Start: hcl.Pos{Line: 12, Column: 21}}},
			{Severity: hcl.DiagWarning, Summary: "Uncapped retry",
				Subject: &hcl.Range{Filename: "b.hcl", Start: hcl.Pos{Line: 3, Column: 5}}},
			{Severity: hcl.DiagError, Summary: "No files"},
		}, `[
  {
    "severity": "error",
    "file": "a.hcl",
    "line": 12,
    "col": 21,
    "message": "Invalid rule: unknown name \"paylod\""
  },
  {
    "severity": "warning",
    "file": "b.hcl",
    "line": 3,
    "col": 5,
    "message": "Uncapped retry"
  },
  {
    "severity": "error",
    "file": "",
    "line": 0,
    "col": 0,
    "message": "No files"
  }
]
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteDiagnosticsJSON(&b, tc.diags); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}
