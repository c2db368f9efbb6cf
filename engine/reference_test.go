package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// Every Header constant of message.go is in Headers, the table the reference is written from.
func TestEveryHeaderIsDocumented(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "message.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, h := range Headers {
		documented[h.Name] = h.Doc != "" && h.On != ""
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Header") || len(vs.Values) != 1 {
			return true
		}
		lit, ok := vs.Values[0].(*ast.BasicLit)
		if !ok {
			return true
		}
		n++
		if name := strings.Trim(lit.Value, `"`); !documented[name] {
			t.Errorf("header %s (%s) is not documented in engine.Headers", name, vs.Names[0].Name)
		}
		return true
	})
	if n != len(Headers) {
		t.Errorf("message.go declares %d headers, Headers documents %d", n, len(Headers))
	}
}

func TestEveryOutcomeIsDocumented(t *testing.T) {
	for _, l := range OutcomeLabels {
		if OutcomeLabelDocs[l] == "" {
			t.Errorf("outcome label %q has no doc in engine.OutcomeLabelDocs", l)
		}
	}
	for k := KindAck; k <= KindDeadLetter; k++ {
		found := false
		for _, d := range Kinds {
			found = found || (d.Kind == k && d.Doc != "")
		}
		if !found {
			t.Errorf("outcome %s is not documented in engine.Kinds", k)
		}
	}
}
