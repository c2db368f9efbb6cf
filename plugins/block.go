package plugins

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
)

// Block is where a handler block was written: its header and the attributes and nested blocks
// its body holds, each with its range. A BlockValidator gets one after the body decoded cleanly.
type Block struct {
	// DefRange is the block's header (`handler "http" {`), where a missing attribute or a
	// wrong combination is reported.
	DefRange hcl.Range
	// Attributes are the attributes written in the body, by name.
	Attributes hcl.Attributes
	// Blocks are the nested blocks written in the body, in order.
	Blocks hcl.Blocks
}

// newBlock indexes body with the schema implied by cfg's gohcl tags. The body has already been
// decoded, so any diagnostics here repeat ones the user has seen and are dropped.
func newBlock(body hcl.Body, rng hcl.Range, cfg any) Block {
	b := Block{DefRange: rng}
	schema, _ := gohcl.ImpliedBodySchema(cfg)
	if content, _, _ := body.PartialContent(schema); content != nil {
		b.Attributes = content.Attributes
		b.Blocks = content.Blocks
	}
	return b
}

// Range is where a diagnostic about the named attribute belongs: its value when it was written,
// else the block's header.
func (b Block) Range(name string) *hcl.Range {
	if a, ok := b.Attributes[name]; ok {
		return a.Expr.Range().Ptr()
	}
	return b.DefRange.Ptr()
}

// Error is an error diagnostic about the named attribute, at Range(name).
func (b Block) Error(name, summary, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: b.Range(name)}
}

// Child is the first nested block of type typ, with its attributes indexed (blocks nested
// deeper are not), or false when none was written.
func (b Block) Child(typ string) (Block, bool) {
	for _, blk := range b.Blocks {
		if blk.Type != typ {
			continue
		}
		attrs, _ := blk.Body.JustAttributes()
		return Block{DefRange: blk.DefRange, Attributes: attrs}, true
	}
	return Block{}, false
}

// Path resolves p relative to the directory of the HCL file that declares the block, as flowrun
// does for every path in its configuration. An absolute p is returned cleaned.
func (b Block) Path(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	dir := filepath.Dir(b.DefRange.Filename)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return filepath.Join(dir, p)
}

// Duration parses value, the string written for the named attribute, as a Go duration that must
// be greater than zero. The diagnostic points at the attribute's value.
func (b Block) Duration(name, value string) (time.Duration, *hcl.Diagnostic) {
	d, err := time.ParseDuration(value)
	if err != nil {
		return 0, b.Error(name, "Invalid duration", fmt.Sprintf(
			"%q is not a duration: %s. Write a Go duration such as \"250ms\", \"30s\" or \"1h\".",
			value, strings.TrimPrefix(err.Error(), "time: ")))
	}
	if d <= 0 {
		return 0, b.Error(name, "Invalid value", fmt.Sprintf("%q must be greater than zero.", name))
	}
	return d, nil
}
