package plugins

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/flowrun/flowrun/internal/hclutil"
	"github.com/flowrun/flowrun/schema"
)

// The config decoder: gohcl's struct tags and semantics (`hcl:"name"`, `hcl:"name,optional"`,
// `hcl:"name,block"`, `hcl:"name,label"`, `hcl:"name,remain"`, `hcl:"name,body"`), plus
// time.Duration and *time.Duration attributes written as Go duration strings ("250ms", "30s",
// "1h"), each mistake a diagnostic at the attribute's value. Every value other than a duration
// is decoded by gohcl itself, so its diagnostics are gohcl's.

var (
	durationType    = reflect.TypeFor[time.Duration]()
	durationPtrType = reflect.TypeFor[*time.Duration]()
	bodyType        = reflect.TypeFor[hcl.Body]()
	exprType        = reflect.TypeFor[hcl.Expression]()
	attrPtrType     = reflect.TypeFor[*hcl.Attribute]()
)

type fieldTag struct {
	index int
	name  string
	kind  string // attr, optional, block, label, remain, body
}

// fieldTags lists the fields of struct type t that carry an hcl tag.
func fieldTags(t reflect.Type) []fieldTag {
	var tags []fieldTag
	for i := range t.NumField() {
		tag, ok := t.Field(i).Tag.Lookup("hcl")
		if !ok {
			continue
		}
		name, kind, _ := strings.Cut(tag, ",")
		if kind == "" {
			kind = "attr"
		}
		tags = append(tags, fieldTag{index: i, name: name, kind: kind})
	}
	return tags
}

// checkConfigType reports what would make t unusable as a config struct, before any HCL is
// read: Register panics with it.
func checkConfigType(t reflect.Type) (err error) {
	if t.Kind() != reflect.Struct {
		return fmt.Errorf("the config type %s is not a struct", t)
	}
	defer func() { // gohcl panics on tags it cannot use
		if r := recover(); r != nil {
			err = fmt.Errorf("config type %s: %v", t, r)
		}
	}()
	gohcl.ImpliedBodySchema(reflect.New(t).Interface())
	for _, f := range fieldTags(t) {
		ft := t.Field(f.index).Type
		switch f.kind {
		case "attr", "optional", "remain", "body":
		case "label":
			if ft.Kind() != reflect.String {
				return fmt.Errorf("field %s: a label is a string, not %s", t.Field(f.index).Name, ft)
			}
		case "block":
			elem := ft
			if elem.Kind() == reflect.Slice {
				elem = elem.Elem()
			}
			if elem.Kind() == reflect.Pointer {
				elem = elem.Elem()
			}
			if elem.Kind() != reflect.Struct {
				return fmt.Errorf("field %s: a block is a struct, a pointer to one or a slice of either, not %s", t.Field(f.index).Name, ft)
			}
			if err := checkConfigType(elem); err != nil {
				return err
			}
		default:
			return fmt.Errorf("field %s: unknown hcl tag kind %q", t.Field(f.index).Name, f.kind)
		}
	}
	return nil
}

// applyDefaults sets each field of the struct v whose attribute b declares with a typed default
// (schema.Attr.Value) to that default, before the body is decoded over it: the default the
// reference shows is the one decoding applies. checkDefaults has checked the types.
func applyDefaults(b *schema.Body, v reflect.Value) {
	if b == nil {
		return
	}
	for _, f := range fieldTags(v.Type()) {
		if a, ok := b.Attr(f.name); ok && a.Value != nil && (f.kind == "attr" || f.kind == "optional") {
			v.Field(f.index).Set(reflect.ValueOf(a.Value))
		}
	}
}

// decodeBody decodes body into the struct v (addressable). header is the range of the block
// that holds body, where a missing attribute or block is reported (SPEC §2), rather than at the
// body's opening brace as hcl would.
func decodeBody(body hcl.Body, ctx *hcl.EvalContext, v reflect.Value, header hcl.Range) hcl.Diagnostics {
	schema, partial := gohcl.ImpliedBodySchema(v.Addr().Interface())
	var content *hcl.BodyContent
	var rest hcl.Body
	var diags hcl.Diagnostics
	if partial {
		content, rest, diags = body.PartialContent(schema)
	} else {
		content, diags = body.Content(schema)
	}
	missing := body.MissingItemRange()
	for _, d := range diags {
		if d.Subject != nil && *d.Subject == missing {
			d.Subject = header.Ptr()
		}
	}
	if content == nil {
		return diags
	}
	for _, f := range fieldTags(v.Type()) {
		fv := v.Field(f.index)
		switch f.kind {
		case "attr", "optional":
			if a, ok := content.Attributes[f.name]; ok {
				diags = append(diags, decodeAttr(a, ctx, fv)...)
			}
		case "block":
			diags = append(diags, decodeBlocks(content.Blocks.OfType(f.name), ctx, fv, f.name, header)...)
		case "remain":
			if rest == nil {
				continue
			}
			if fv.Type() == bodyType {
				fv.Set(reflect.ValueOf(rest))
			} else {
				diags = append(diags, gohcl.DecodeBody(rest, ctx, fv.Addr().Interface())...)
			}
		case "body":
			if fv.Type() == bodyType {
				fv.Set(reflect.ValueOf(body))
			}
		}
	}
	return diags
}

func decodeAttr(a *hcl.Attribute, ctx *hcl.EvalContext, fv reflect.Value) hcl.Diagnostics {
	switch fv.Type() {
	case durationType:
		d, diags := decodeDuration(a, ctx)
		if !diags.HasErrors() {
			fv.SetInt(int64(d))
		}
		return diags
	case durationPtrType:
		if v, _ := a.Expr.Value(ctx); v.IsNull() {
			fv.SetZero()
			return nil
		}
		d, diags := decodeDuration(a, ctx)
		if !diags.HasErrors() {
			fv.Set(reflect.ValueOf(&d))
		}
		return diags
	case exprType:
		fv.Set(reflect.ValueOf(a.Expr))
		return nil
	case attrPtrType:
		fv.Set(reflect.ValueOf(a))
		return nil
	}
	return gohcl.DecodeExpression(a.Expr, ctx, fv.Addr().Interface())
}

// valueProblem marks (as hcl.Diagnostic.Extra) a value of the right type that is still wrong, a
// string that is not a duration: unlike a type error, it does not keep Validate from running,
// so the user sees it together with the other mistakes of the block.
type valueProblem struct{}

// decodeDuration evaluates a as a string (gohcl's diagnostics for anything else) and parses it
// with hclutil's duration parser as a duration that must not be negative.
func decodeDuration(a *hcl.Attribute, ctx *hcl.EvalContext) (time.Duration, hcl.Diagnostics) {
	var s string
	if diags := gohcl.DecodeExpression(a.Expr, ctx, &s); diags.HasErrors() {
		return 0, diags
	}
	d, diags := hclutil.ParseDuration(a, s, false)
	for _, diag := range diags {
		diag.Extra = valueProblem{}
	}
	return d, diags
}

// decodeBlocks decodes the blocks of one type into fv: a struct (exactly one block), a pointer
// to one (at most one), or a slice of either (any number). header is the enclosing block's.
func decodeBlocks(blocks hcl.Blocks, ctx *hcl.EvalContext, fv reflect.Value, name string, header hcl.Range) hcl.Diagnostics {
	t := fv.Type()
	if t.Kind() == reflect.Slice {
		if len(blocks) == 0 {
			return nil // defaults stay
		}
		var diags hcl.Diagnostics
		s := reflect.MakeSlice(t, len(blocks), len(blocks))
		for i, b := range blocks {
			ev := s.Index(i)
			if t.Elem().Kind() == reflect.Pointer {
				ev.Set(reflect.New(t.Elem().Elem()))
				ev = ev.Elem()
			}
			diags = append(diags, decodeBlock(b, ctx, ev)...)
		}
		fv.Set(s)
		return diags
	}
	switch {
	case len(blocks) == 0 && t.Kind() == reflect.Pointer:
		return nil // optional; a default stays
	case len(blocks) == 0:
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  fmt.Sprintf("Missing %s block", name),
			Detail:   fmt.Sprintf("A %s block is required.", name),
			Subject:  header.Ptr(),
		}}
	case len(blocks) > 1:
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  fmt.Sprintf("Duplicate %s block", name),
			Detail:   fmt.Sprintf("Only one %s block is allowed. Another was defined at %s.", name, blocks[0].DefRange),
			Subject:  blocks[1].DefRange.Ptr(),
		}}
	}
	if t.Kind() == reflect.Pointer {
		nv := reflect.New(t.Elem())
		if !fv.IsNil() {
			nv.Elem().Set(fv.Elem()) // a default block's values are its defaults
		}
		diags := decodeBlock(blocks[0], ctx, nv.Elem())
		fv.Set(nv)
		return diags
	}
	return decodeBlock(blocks[0], ctx, fv)
}

// decodeBlock sets v's label fields from b's labels and decodes b's body into v.
func decodeBlock(b *hcl.Block, ctx *hcl.EvalContext, v reflect.Value) hcl.Diagnostics {
	i := 0
	for _, f := range fieldTags(v.Type()) {
		if f.kind == "label" && i < len(b.Labels) {
			v.Field(f.index).SetString(b.Labels[i])
			i++
		}
	}
	return decodeBody(b.Body, ctx, v, b.DefRange)
}
