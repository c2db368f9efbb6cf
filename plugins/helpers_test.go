package plugins

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/flowrun/flowrun/internal/handlers"
)

// decodeHandler parses src, which holds one `handler "NAME" {}` block, as the file filename
// and decodes the block as flowrun's loader does, through the registry.
func decodeHandler(t *testing.T, filename, src string) (handlers.Config, hcl.Diagnostics) {
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
	p, ok := handlers.Lookup(b.Labels[0])
	if !ok {
		t.Fatalf("no handler %q", b.Labels[0])
	}
	return p.Decode(b.Body, nil, b.DefRange)
}

// build decodes src and provisions the handler (Build), failing the test on any diagnostic,
// and closes it when the test ends.
func build(t *testing.T, filename, src string) Handler {
	t.Helper()
	h, err := Build(context.Background(), filename, src)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() {
		if c, ok := h.(Closer); ok {
			if err := c.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
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

// message is a test message of key payouts and id 1-0.
func message(payload string, headers map[string]string, attempt int) TestMessage {
	return TestMessage{Key: "payouts", ID: "1-0", Headers: headers, Payload: []byte(payload), Attempt: attempt}
}

// call hands m to h as the engine would.
func call(h Handler, m TestMessage) Result { return Call(context.Background(), h, m) }

// payloads lists the emitted payloads as strings.
func payloads(emits []Emitted) []string {
	out := make([]string, 0, len(emits))
	for _, e := range emits {
		out = append(out, string(e.Payload))
	}
	return out
}
