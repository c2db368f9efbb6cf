package pipe

import (
	"os"
	"strings"
	"testing"
)

// TestReferenceExampleIsTheExampleFile: the reference's pipe example is the pipeline of
// examples/pipe.hcl, word for word, so the page and the file a newcomer runs cannot drift apart
// (the string is compiled in; the file adds the how-to-run comment and its test blocks).
func TestReferenceExampleIsTheExampleFile(t *testing.T) {
	src, err := os.ReadFile("../../examples/pipe.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), pipeExample) {
		t.Fatal("examples/pipe.hcl does not contain the reference example (pipeExample in docs.go) verbatim: change both together")
	}
}
