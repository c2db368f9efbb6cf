package builtin

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
)

// For every registered kind, the default the reference documents for an attribute (its
// declaration's) is what decoding a block that leaves the attribute out yields: the field of
// the decoded Config named after it holds it.
func TestDocumentedDefaultsAreDecoded(t *testing.T) {
	from := map[string]any{schema.FromPipelineName: "orders", schema.FromHostName: "host-1"}
	for _, k := range transports.Kinds() {
		b := &transports.Block{
			Kind:     k.Name,
			Body:     &hcl.BodyContent{Attributes: hcl.Attributes{}},
			Pipeline: transports.Pipeline{Name: "orders"},
			Consumer: "host-1",
			Dir:      "/cfg",
		}
		cfg := k.New()
		cfg.Decode(b)
		fields := map[string]reflect.Value{}
		collectFields(reflect.ValueOf(cfg), fields)
		attrs := append([]schema.Attr{}, k.Attrs...)
		for _, pa := range k.PipelineAttrs {
			attrs = append(attrs, pa.Attr)
		}
		for _, a := range attrs {
			if a.Kind == schema.KindNone {
				t.Errorf("%s: %q is declared as prose only, not typed", k.Name, a.Name)
				continue
			}
			want := a.Value
			if a.From != "" {
				want = from[a.From]
			}
			if want == nil {
				continue // no default, or one the kind works out from other attributes
			}
			if a.From == "" && a.Default != schema.Value(a.Value) {
				t.Errorf("%s: %q documents the default %s, declared %v", k.Name, a.Name, a.Default, a.Value)
			}
			f, ok := fields[strings.ReplaceAll(a.Name, "_", "")]
			if !ok {
				t.Errorf("%s: no Config field holds %q", k.Name, a.Name)
				continue
			}
			if got := f.Interface(); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %q decodes to %v from an empty block; the reference says %s", k.Name, a.Name, got, a.Default)
			}
		}
	}
}

// collectFields indexes the exported fields of the struct v points to, embedded structs'
// included, by their lower-case name.
func collectFields(v reflect.Value, into map[string]reflect.Value) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return
	}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		switch {
		case f.Anonymous:
			collectFields(v.Field(i), into)
		case f.IsExported():
			into[strings.ToLower(f.Name)] = v.Field(i)
		}
	}
}
