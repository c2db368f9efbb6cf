package plugins

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
)

// What a handler's tests and examples use: Check and Build read a handler block as flowrun's
// loader does, Call runs a handler on one message as the engine does.

// Check decodes and validates the one `handler "NAME" {}` block in src, HCL text read as the file
// filename (on its own or inside a pipeline block), as `flowrun validate` does, with the handler
// registered under NAME. Configuration mistakes come back as one error, a line each in the
// command line's form: FILE:LINE:COL: error: Summary: Detail. flowrun's HCL functions (env,
// file) are not available here.
func Check(filename, src string) error {
	_, err := load(filename, src)
	return err
}

// Build is Check, then Provision with a Logger that discards: the handler as `flowrun run`
// builds it, to call with Call. Build does not call Start.
func Build(ctx context.Context, filename, src string) (Handler, error) {
	cfg, err := load(filename, src)
	if err != nil {
		return nil, err
	}
	p, ok := cfg.(interface {
		provision(context.Context, Env) (Handler, error)
	})
	if !ok {
		return nil, fmt.Errorf("plugins: %T was not registered with plugins.Register", cfg)
	}
	return p.provision(ctx, Env{Logger: zerolog.Nop()})
}

func load(filename, src string) (handlers.Config, error) {
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), filename)
	if diags.HasErrors() {
		return nil, diagError{diags}
	}
	var found []*hclsyntax.Block
	var walk func(*hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, blk := range b.Blocks {
			if blk.Type == "handler" {
				found = append(found, blk)
				continue
			}
			walk(blk.Body)
		}
	}
	walk(f.Body.(*hclsyntax.Body))
	if len(found) != 1 || len(found[0].Labels) != 1 {
		return nil, fmt.Errorf("plugins: %s holds %d handler blocks with one label each, want one", filename, len(found))
	}
	blk := found[0].AsHCLBlock()
	p, ok := handlers.Lookup(blk.Labels[0])
	if !ok {
		return nil, fmt.Errorf("plugins: no handler %q is registered: %s", blk.Labels[0], strings.Join(handlers.Names(), ", "))
	}
	cfg, diags := p.Decode(blk.Body, nil, blk.DefRange)
	if diags.HasErrors() {
		return nil, diagError{diags}
	}
	return cfg, nil
}

// diagError is diagnostics as one error, a line each; errors.As finds the hcl.Diagnostics.
type diagError struct{ diags hcl.Diagnostics }

func (e diagError) Error() string {
	lines := make([]string, 0, len(e.diags))
	for _, d := range e.diags {
		sev := "error"
		if d.Severity == hcl.DiagWarning {
			sev = "warning"
		}
		line := sev + ": " + d.Summary
		if d.Detail != "" {
			line += ": " + d.Detail
		}
		if d.Subject != nil {
			line = fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, line)
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

func (e diagError) Unwrap() error { return e.diags }

// TestMessage is a message to Call a handler with.
type TestMessage struct {
	Key     string
	ID      string
	Headers map[string]string
	Payload []byte
	// Attempt is the attempt number; 0 counts as 1, a first delivery.
	Attempt int
	// DeliveryCount and IdleMS are as a claiming or reclaim source sets them.
	DeliveryCount int
	IdleMS        int64
	// Run makes the message a visit of a workflow step (nil: a pipeline's message): the
	// handler sees it through Message.Run, its Output is recorded in Result.Output, and the
	// message gets the x-idempotency-key header the step would (unless Headers sets one).
	// Visit 0 counts as 1.
	Run *RunInfo
}

// Result is what the engine makes of one Handle call.
type Result struct {
	// Outcome is the outcome acted on: Retry when Err is set and the handler returned Ack,
	// Drop or no outcome.
	Outcome Outcome
	// Emits are the messages written before the delivery is settled; none when Err is set.
	Emits []Emitted
	// Err is the handler's error, a failed Emit's, or the error of a handler that returned no
	// outcome; the engine logs it.
	Err error
	// Output is what the handler set with Emitter.Output, as JSON, when the TestMessage had a
	// Run and Err is nil; nil otherwise.
	Output json.RawMessage
}

// Call hands m to h as the engine would, without a pipeline: for a handler's tests and
// examples. A panic in Handle is not recovered.
func Call(ctx context.Context, h Handler, m TestMessage) Result {
	headers := make(map[string]string, len(m.Headers))
	maps.Copy(headers, m.Headers)
	d := &engine.Delivery{
		Message:       engine.Message{Key: m.Key, ID: m.ID, Headers: headers, Payload: m.Payload},
		Attempt:       max(m.Attempt, 1),
		DeliveryCount: m.DeliveryCount,
		IdleMS:        m.IdleMS,
	}
	if m.Run != nil {
		d.Run = m.Run.engineRun()
		if _, ok := headers[engine.HeaderIdempotencyKey]; !ok {
			headers[engine.HeaderIdempotencyKey] = engine.IdempotencyKey(d.Run.Workflow, d.Run.ID, d.Run.Step, d.Run.Visit, -1)
		}
	}
	o, emits, err := invoke(ctx, h, Message{d: d}, zerolog.Nop())
	res := Result{Outcome: o, Emits: emits, Err: err}
	if d.Run != nil && d.Run.HasOutput {
		res.Output, _ = d.Run.Output.(json.RawMessage)
	}
	return res
}
