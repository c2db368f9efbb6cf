package plugins

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

// decodeHandler parses src, which holds one `handler "NAME" {}` block, as the file filename
// and decodes the block with the named plugin.
func decodeHandler(t *testing.T, filename, src string) (Plugin, any, hcl.Diagnostics) {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), filename)
	if diags.HasErrors() {
		t.Fatalf("parse: %s", diags)
	}
	content, diags := f.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "handler", LabelNames: []string{"name"}}}})
	if diags.HasErrors() || len(content.Blocks) != 1 {
		t.Fatalf("want one handler block: %s", diags)
	}
	b := content.Blocks[0]
	p, ok := Lookup(b.Labels[0])
	if !ok {
		t.Fatalf("no handler %q", b.Labels[0])
	}
	cfg, diags := p.Decode(b.Body, nil, b.DefRange)
	return p, cfg, diags
}

// build decodes src and builds the handler, failing the test on any diagnostic.
func build(t *testing.T, filename, src string) engine.Handler {
	t.Helper()
	p, cfg, diags := decodeHandler(t, filename, src)
	if diags.HasErrors() {
		t.Fatalf("decode: %s", formatDiags(diags))
	}
	h, err := p.New(context.Background(), cfg, Env{Pipeline: "test", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() {
		if err := Close(h); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return h
}

// formatDiags renders diagnostics as `FILE:LINE:COL: Summary: Detail`, one a line.
func formatDiags(diags hcl.Diagnostics) []string {
	out := make([]string, 0, len(diags))
	for _, d := range diags {
		pos := "?"
		if d.Subject != nil {
			pos = fmt.Sprintf("%s:%d:%d", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		out = append(out, fmt.Sprintf("%s: %s: %s", pos, d.Summary, d.Detail))
	}
	return out
}

func delivery(payload string, headers map[string]string, attempt int) *engine.Delivery {
	if headers == nil {
		headers = map[string]string{}
	}
	return &engine.Delivery{
		Message: engine.Message{Key: "payouts", ID: "1-0", Headers: headers, Payload: []byte(payload)},
		Attempt: attempt,
	}
}
