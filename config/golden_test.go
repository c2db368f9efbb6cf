package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/bad")

// TestGoldenDiagnostics loads each testdata/bad/NAME.hcl, and each folder testdata/bad/NAME, and
// compares what WriteDiagnostics prints with testdata/bad/NAME.golden.
func TestGoldenDiagnostics(t *testing.T) {
	// Make sure the variables the files use are unset, whatever the environment.
	for _, v := range []string{"FLOWRUN_TEST_UNSET", "FLOWRUN_TEST_UNSET_WHEN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	entries, err := os.ReadDir("testdata/bad")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		"missing_path": {"testdata/bad/does-not-exist.hcl", "testdata/bad/types.hcl"},
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir():
			cases[name] = []string{filepath.Join("testdata/bad", name)}
		case strings.HasSuffix(name, ".hcl"):
			cases[strings.TrimSuffix(name, ".hcl")] = []string{filepath.Join("testdata/bad", name)}
		}
	}
	for _, name := range sortedKeys(cases) {
		t.Run(name, func(t *testing.T) {
			cfg, diags := Load(cases[name], Options{Hostname: "host1"})
			if !diags.HasErrors() {
				t.Fatalf("no errors")
			}
			for _, d := range diags {
				if d.Subject == nil {
					t.Errorf("diagnostic without a subject: %s: %s", d.Summary, d.Detail)
				}
			}
			var b bytes.Buffer
			WriteDiagnostics(&b, cfg.Files(), diags)
			golden := filepath.Join("testdata/bad", name+".golden")
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got := b.String(); got != string(want) {
				t.Errorf("diagnostics differ from %s (run with -update to accept):\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
		})
	}
}
