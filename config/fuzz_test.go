package config

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
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
		if readsDevice(src) {
			t.Skip("file() of a path that may be a device or FIFO: reading it never ends")
		}
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

// fileCall finds what may be a call of file(): the name, then "(" after blanks or comments.
// safeFileCall is one whose argument is a plain literal naming no special place.
var (
	fileCall     = regexp.MustCompile(`file(?:\s|#[^\n]*|//[^\n]*|/\*[\s\S]*?\*/)*\(`)
	safeFileCall = regexp.MustCompile(`file\(\s*"([^"\\$%]*)"\s*\)`)
)

// readsDevice reports whether src may call file() on something that is not a plain file:
// file() reads whatever it is given, and /dev/zero or a FIFO never ends (a finding reported
// separately). Only calls with a literal argument that names no special place are let through.
func readsDevice(src []byte) bool {
	calls := fileCall.FindAll(src, -1)
	if len(calls) == 0 {
		return false
	}
	safe := safeFileCall.FindAllSubmatch(src, -1)
	if len(safe) != len(calls) {
		return true
	}
	for _, m := range safe {
		for _, bad := range []string{"dev", "proc", "sys", "fd", "std", ".."} {
			if bytes.Contains(m[1], []byte(bad)) {
				return true
			}
		}
	}
	return false
}

func TestReadsDevice(t *testing.T) {
	tests := []struct {
		src  string
		want bool
	}{
		{`x = "no call"`, false},
		{`source "file" { path = "x" }`, false},
		{`payload = file("payload.json")`, false},
		{`x = file("/dev/zero")`, true},
		{`x = file("../../x")`, true},
		{`x = file("/d${"e"}v/zero")`, true},
		{`x = file(env("P"))`, true},
		{"x = file /* c */ (\"a\")", true},
		{`x = file("a") + file("/proc/self/fd/0")`, true},
	}
	for _, tt := range tests {
		if got := readsDevice([]byte(tt.src)); got != tt.want {
			t.Errorf("readsDevice(%q) = %v, want %v", tt.src, got, tt.want)
		}
	}
}
