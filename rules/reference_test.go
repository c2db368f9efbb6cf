package rules

import "testing"

// The reference in docs/ lists the environment from the env structs; each name needs a doc.
func TestEveryVariableIsDocumented(t *testing.T) {
	for _, v := range append(Variables(), FilterVariables()...) {
		if v.Doc == "" {
			t.Errorf("expression variable %q has no doc: add it to varDocs in rules/reference.go", v.Name)
		}
	}
	if got := len(Variables()); got != 16 {
		t.Errorf("Variables: %d names, want the 11 of SPEC §7 and the 5 of §16", got)
	}
	for _, f := range Functions() {
		if f.Doc == "" || f.Signature == "" {
			t.Errorf("function %q lacks a doc or signature", f.Name)
		}
	}
}
