package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// graph marks a for_each step (SPEC §16 "Fan-out"), beside its delay.
func TestGraphWorkflowForEach(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fan.hcl")
	if err := os.WriteFile(path, []byte(`redis "main" {
  url = "redis://127.0.0.1:1/0"
}

workflow "fan" {
  start {
    source "stream" {
      stream = "albums"
    }
  }
  step "resize" {
    for_each = "input.images"
    handler "http" {
      url = "http://images.internal/resize"
    }
    next = "publish"
  }
  step "publish" {
    for_each = "steps.resize"
    delay    = "1m"
    handler "http" {
      url = "http://images.internal/publish"
    }
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "graph", path)
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	for _, want := range []string{`w_fan_resize(["resize (for each)"])`, `w_fan_publish(["publish (for each, delay 1m)"])`, "w_fan_resize --> w_fan_publish"} {
		if !strings.Contains(out, want) {
			t.Errorf("graph lacks %q:\n%s", want, out)
		}
	}
}
