package config

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestShippedFilesAreCanonical: the examples a user copies and the valid configurations the
// tests load are already in `flowrun fmt` layout, so `fmt -check` on them passes.
func TestShippedFilesAreCanonical(t *testing.T) {
	var paths []string
	for _, g := range []string{"../examples/*.hcl", "testdata/valid/*.hcl"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m...)
	}
	if len(paths) == 0 {
		t.Fatal("no files found")
	}
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out, _, diags := Format(p, src)
		if diags.HasErrors() {
			t.Errorf("%s: %v", p, diags)
			continue
		}
		if !bytes.Equal(out, src) {
			t.Errorf("%s is not in canonical layout: run flowrun fmt %s", p, p)
		}
	}
}
