package plugins

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
)

// Block is where a handler block was written: its header and the attributes and nested blocks
// its body holds, each with its range. Validate gets one, to put each error where it belongs.
type Block struct {
	def    hcl.Range // the header: handler "http" {
	attrs  hcl.Attributes
	blocks hcl.Blocks
}

// newBlock indexes body with the schema implied by cfg's tags. The body has already been
// decoded, so any diagnostics here repeat ones the user has seen and are dropped.
func newBlock(body hcl.Body, def hcl.Range, cfg any) Block {
	b := Block{def: def}
	schema, _ := gohcl.ImpliedBodySchema(cfg)
	if content, _, _ := body.PartialContent(schema); content != nil {
		b.attrs = content.Attributes
		b.blocks = content.Blocks
	}
	return b
}

// Errorf is an error about the named attribute, reported as a diagnostic at its value:
// FILE:LINE:COL: error: Summary: Detail, the detail formatted as by fmt.Sprintf. When the
// attribute was not written, or attr is "", the diagnostic is at the block's header.
func (b Block) Errorf(attr, summary, format string, args ...any) error {
	rng := b.def
	if a, ok := b.attrs[attr]; ok {
		rng = a.Expr.Range()
	}
	return &blockError{rng: rng, summary: summary, detail: fmt.Sprintf(format, args...)}
}

// Child is the first nested block of type typ, with its attributes indexed, or false when none
// was written.
func (b Block) Child(typ string) (Block, bool) {
	for _, blk := range b.blocks {
		if blk.Type != typ {
			continue
		}
		attrs, _ := blk.Body.JustAttributes()
		return Block{def: blk.DefRange, attrs: attrs}, true
	}
	return Block{}, false
}

// Path resolves p relative to the directory of the HCL file that declares the block, as flowrun
// does for every path in its configuration. An absolute p is returned cleaned. Env.Path gives
// Provision the same answer.
func (b Block) Path(p string) string { return resolvePath(fileDir(b.def.Filename), p) }

// blockError is an error made by Block.Errorf: a diagnostic's parts.
type blockError struct {
	rng             hcl.Range
	summary, detail string
}

func (e *blockError) Error() string { return e.summary + ": " + e.detail }

// errorDiags turns Validate's error into diagnostics: each error of a join on its own, at the
// range Block.Errorf gave it, else at the block's header. hcl diagnostics pass as they are.
func errorDiags(err error, header hcl.Range) hcl.Diagnostics {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var diags hcl.Diagnostics
		for _, e := range j.Unwrap() {
			diags = append(diags, errorDiags(e, header)...)
		}
		return diags
	}
	var diags hcl.Diagnostics
	if errors.As(err, &diags) {
		return diags
	}
	var diag *hcl.Diagnostic
	if errors.As(err, &diag) {
		return hcl.Diagnostics{diag}
	}
	var be *blockError
	if errors.As(err, &be) {
		d := &hcl.Diagnostic{Severity: hcl.DiagError, Summary: be.summary, Detail: be.detail, Subject: be.rng.Ptr()}
		if err != error(be) { // wrapped: keep what the wrapper added
			d.Detail = strings.Replace(err.Error(), be.Error(), be.detail, 1)
		}
		return hcl.Diagnostics{d}
	}
	return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid handler configuration", Detail: err.Error(), Subject: header.Ptr()}}
}
