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
	workflows, err := filepath.Glob("testdata/workflow/*.hcl")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, workflows...)
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

// TestFormatWorkflow: fmt lays out a workflow's blocks as any other (attributes aligned per
// run of lines, nested blocks indented).
func TestFormatWorkflow(t *testing.T) {
	src := "workflow \"order\" {\nrun_id = \"payload.id\"\n  on_failure=\"stop\"\nstart {\nsource \"stream\" { stream = \"orders\" }\n}\n  step \"a\" {\n  rule \"r\" {\n  next = \"b\"\n  complete=false\n}\n  }\n}\n"
	want := `workflow "order" {
  run_id     = "payload.id"
  on_failure = "stop"
  start {
    source "stream" { stream = "orders" }
  }
  step "a" {
    rule "r" {
      next     = "b"
      complete = false
    }
  }
}
`
	out, _, diags := Format("w.hcl", []byte(src))
	if diags.HasErrors() || string(out) != want {
		t.Errorf("got %v:\n%s\nwant:\n%s", diags, out, want)
	}
}
