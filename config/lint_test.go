package config

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

// SPEC §12: valid but almost always a mistake, reported as positioned warnings; nothing is an
// error, so validate and run go on.
func TestLintWarnings(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string // "LINE:COL: warning: SUMMARY", in order; none for a clean file
	}{
		{"bare retry on a stream without a cap", `
pipeline "p" {
  source "stream" {
    stream = "s"
  }
  rule "r" {
    outcome = "attempt < 3 ? retry : drop"
  }
}
`, []string{"10:15: warning: Retry without a cap loops at full speed"}},
		{"capped", `
pipeline "p" {
  source "stream" {
    stream = "s"
  }
  max_attempts = 5
  rule "r" {
    outcome = "retry"
  }
}
`, nil},
		{"retry_after only", `
pipeline "p" {
  source "stream" {
    stream = "s"
  }
  rule "r" {
    outcome = "retry_after(backoff('1s', '5m'))"
  }
}
`, nil},
		{"claiming leaves the entry pending", `
pipeline "p" {
  source "claiming" {
    stream   = "s"
    min_idle = "30s"
  }
  rule "r" {
    outcome = "retry"
  }
}
`, nil},
		{"otherwise on a pipe with a dead letter", `
pipeline "p" {
  source "pipe" {}
  out_retry   = "again"
  dead_letter = "dlq"
  rule "r" {
    when    = "key == 'x'"
    outcome = "ack"
  }
  otherwise = "retry"
}
`, []string{"13:15: warning: Retry without a cap loops at full speed"}},
		{"http timeout beyond shutdown_timeout", `
pipeline "p" {
  source "pipe" {}
  out_retry        = "again"
  shutdown_timeout = "5s"
  handler "http" {
    url     = "http://127.0.0.1:1/x"
    timeout = "20s"
  }
}
`, []string{"9:3: warning: Handler timeout exceeds shutdown_timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f.hcl")
			write(t, path, `redis "main" {
  url = "redis://127.0.0.1:1/0"
}
`+tt.src)
			cfg, diags := Load([]string{path}, Options{Hostname: "h"})
			if diags.HasErrors() {
				t.Fatalf("errors: %v", diags)
			}
			var got []string
			for _, d := range diags {
				if d.Severity != hcl.DiagWarning {
					continue
				}
				got = append(got, strings.TrimPrefix(
					strings.SplitN(formatDiag(cfg, d), "\n", 2)[0], path+":"))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("warnings %q, want %q", got, tt.want)
			}
		})
	}
}

// formatDiag is how WriteDiagnostics prints d, first line and snippet.
func formatDiag(cfg *Config, d *hcl.Diagnostic) string {
	var b bytes.Buffer
	WriteDiagnostics(&b, cfg.Files(), hcl.Diagnostics{d})
	out := b.String()
	// "FILE:LINE:COL: warning: Summary: Detail" → keep through the summary.
	first, rest, _ := strings.Cut(out, "\n")
	if i := strings.Index(first, ": warning: "); i >= 0 {
		head, msg := first[:i+len(": warning: ")], first[i+len(": warning: "):]
		summary, _, _ := strings.Cut(msg, ": ")
		first = head + summary
	}
	return first + "\n" + rest
}

// trim and consumer_ttl are stream source attributes with positioned mistakes.
func TestRetentionAttributes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.hcl")
	write(t, path, `redis "main" {
  url = "redis://127.0.0.1:1/0"
}
pipeline "p" {
  source "stream" {
    stream       = "s"
    trim         = "all"
    consumer_ttl = "-1h"
  }
  rule "r" {
    outcome = "ack"
  }
}
`)
	cfg, diags := Load([]string{path}, Options{Hostname: "h"})
	var b bytes.Buffer
	WriteDiagnostics(&b, cfg.Files(), diags)
	out := b.String()
	for _, want := range []string{path + ":7:20: error:", `"trim" takes "acked"`, path + ":8:20: error:"} {
		if !strings.Contains(out, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, out)
		}
	}
}
