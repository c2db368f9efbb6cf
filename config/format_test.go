package config

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestValidTestdataIsCanonical: the valid configurations the tests load are in `flowrun fmt`
// layout, as the examples are (e2e TestValidateExamples runs `fmt -check` on examples/).
func TestValidTestdataIsCanonical(t *testing.T) {
	paths, err := filepath.Glob("testdata/valid/*.hcl")
	if err != nil {
		t.Fatal(err)
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
