package config

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad loads arbitrary bytes as an HCL file: Load and WriteDiagnostics never panic, every
// diagnostic points somewhere (STYLE: a diagnostic always has a Subject), and a load without
// errors yields a configuration. Its seed corpus under testdata/fuzz/FuzzLoad (valid files and
// broken ones) runs with every `go test`; `go test -fuzz=FuzzLoad ./config/` searches further.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "fuzz.hcl")
	f.Fuzz(func(t *testing.T, src []byte) {
		if err := os.WriteFile(path, src, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, diags := Load([]string{path}, Options{Hostname: "fuzz"})
		if cfg == nil {
			t.Fatal("Load returned a nil Config")
		}
		WriteDiagnostics(io.Discard, cfg.Files(), diags)
		for _, d := range diags {
			if d.Subject == nil {
				t.Errorf("diagnostic without a subject: %s: %s", d.Summary, d.Detail)
			}
		}
		if !diags.HasErrors() && cfg.Files()[path] == nil {
			t.Fatalf("loaded without errors but the file is not among Files")
		}
	})
}
