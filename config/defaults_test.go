package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

// The defaults the reference shows for a pipeline's attributes are what a pipeline that leaves
// them out gets, and they are the engine's.
func TestDocumentedPipelineDefaultsAreDecoded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.hcl")
	src := "pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := Load([]string{path}, Options{Hostname: "h"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	pl := cfg.Pipelines[0]
	for name, got := range map[string]any{"shutdown_timeout": pl.ShutdownTimeout, "max_held": pl.MaxHeld} {
		a, _ := pipelineBody.Attr(name)
		if got != a.Value {
			t.Errorf("%s = %v, the reference says %s", name, got, a.Default)
		}
	}
	if pl.ShutdownTimeout != engine.DefaultShutdownTimeout || pl.MaxHeld != engine.DefaultMaxHeld {
		t.Errorf("not the engine's defaults: %v %d", pl.ShutdownTimeout, pl.MaxHeld)
	}
	if a, _ := pipelineBody.Attr("concurrency"); pl.Concurrency != engine.DefaultConcurrency() || a.Default != fromCPUs {
		t.Errorf("concurrency = %d (documented %s), want engine.DefaultConcurrency() = %d", pl.Concurrency, a.Default, engine.DefaultConcurrency())
	}
	if pl.MaxAttempts != 0 || pl.DeadLetter != "" {
		t.Errorf("max_attempts %d, dead_letter %q: want no cap, none", pl.MaxAttempts, pl.DeadLetter)
	}
}

// A flow-control block that leaves lease out gets the lease the reference shows, the engine's.
func TestDocumentedLeaseIsDecoded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.hcl")
	src := "pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  concurrency_key {\n    key   = \"key\"\n    limit = 1\n  }\n  dedupe {\n    key    = \"key\"\n    window = \"1h\"\n  }\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := Load([]string{path}, Options{Hostname: "h"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	f := cfg.Pipelines[0].Flow
	if f.Concurrency.Lease != leaseAttr.Value || f.Dedupe.Lease != leaseAttr.Value || leaseAttr.Value != engine.DefaultLease {
		t.Errorf("leases %v, %v; the reference says %s, the engine's is %v", f.Concurrency.Lease, f.Dedupe.Lease, leaseAttr.Default, engine.DefaultLease)
	}
}

// A telemetry block that leaves sample_ratio out samples what the reference says.
func TestDocumentedSampleRatioIsDecoded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.hcl")
	src := "telemetry {}\npipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, diags := Load([]string{path}, Options{Hostname: "h"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if a, _ := telemetryBody.Attr("sample_ratio"); cfg.Telemetry.SampleRatio != a.Value {
		t.Errorf("sample_ratio = %v, the reference says %s", cfg.Telemetry.SampleRatio, a.Default)
	}
}
