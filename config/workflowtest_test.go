package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A test block that names a workflow decodes into Test.Run: input, mocks by step in order,
// expect.
func TestWorkflowTestBlock(t *testing.T) {
	src := `
redis "main" {
  url = "redis://127.0.0.1:1/0"
}
workflow "w" {
  start {
    source "stream" {
      stream = "s"
    }
  }
  step "a" {
    handler "http" {
      url = "http://127.0.0.1:1/"
    }
    next = "b"
  }
  step "b" {
    rule "ok" {
      output = "1"
    }
  }
}
test "t" {
  workflow = "w"
  input {
    payload = { id = 7 }
  }
  mock "a" {
    status = 503
  }
  mock "a" {
    output  = { id = "x" }
    outcome = "retry_after('5s')"
  }
  mock "a" {}
  expect {
    status = "completed"
    path   = ["a", "b"]
    output = { a = { id = "x" }, b = 1 }
  }
}
`
	file := filepath.Join(t.TempDir(), "w.hcl")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := mustLoad(t, file)
	if len(cfg.Tests) != 1 {
		t.Fatalf("%d tests", len(cfg.Tests))
	}
	tt := cfg.Tests[0]
	r := tt.Run
	if tt.Workflow != "w" || tt.Pipeline != "" || r == nil || string(r.Input) != `{"id":7}` {
		t.Fatalf("test %+v", tt)
	}
	ms := r.Mocks["a"]
	if len(ms) != 3 || ms[0].Mock == nil || ms[0].Mock.String() != "status 503" || ms[0].Output != nil {
		t.Fatalf("mocks %+v", ms)
	}
	if ms[1].Mock != nil || string(ms[1].Output) != `{"id":"x"}` || ms[1].Outcome != "retry_after('5s')" {
		t.Errorf("mock 2 %+v", ms[1])
	}
	if o, ok := ms[1].MockOutcome(); !ok || o.Delay.String() != "5s" {
		t.Errorf("mock 2 outcome %v %v", o, ok)
	}
	if ms[2].Mock == nil {
		t.Error("an empty mock is not the handler's mock with its defaults")
	}
	e := r.Expect
	if e.Status != "completed" || !e.HasPath || !slices.Equal(e.Path, []string{"a", "b"}) ||
		string(e.Output["a"]) != `{"id":"x"}` || string(e.Output["b"]) != "1" {
		t.Errorf("expect %+v", e)
	}
	if tt.ExpectRange.Start.Line == 0 {
		t.Error("no expect range")
	}
}
