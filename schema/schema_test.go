package schema

import (
	"testing"
	"time"
)

func TestHCLAndValue(t *testing.T) {
	b := &Body{
		Attrs:  []Attr{{Name: "url", Required: true}, {Name: "password"}},
		Blocks: []Block{{Type: "source", Labels: []string{"kind"}}},
	}
	s := b.HCL()
	if len(s.Attributes) != 2 || s.Attributes[0].Name != "url" || s.Attributes[0].Required {
		t.Errorf("attributes: %+v (never hcl-Required: flowrun reports a missing one itself)", s.Attributes)
	}
	if len(s.Blocks) != 1 || s.Blocks[0].Type != "source" || s.Blocks[0].LabelNames[0] != "kind" {
		t.Errorf("blocks: %+v", s.Blocks)
	}
	for v, want := range map[any]string{"0": "`\"0\"`", time.Second: "`\"1s\"`", 100: "`100`", true: "`true`"} {
		if got := Value(v); got != want {
			t.Errorf("Value(%v) = %s, want %s", v, got, want)
		}
	}
}
