package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/rules"
	"github.com/flowrun/flowrun/schema"
)

// Flow is a pipeline's flow control (SPEC §13): any of its three blocks, each nil when absent.
type Flow struct {
	Concurrency *ConcurrencyKey
	Throttle    *Throttle
	Dedupe      *Dedupe
}

// ConcurrencyKey is `concurrency_key {}`.
type ConcurrencyKey struct {
	Key   *rules.Key
	Limit int
	// Lease is how long a key stays taken by a process that stopped renewing it (crashed):
	// `lease`, default DefaultLease.
	Lease     time.Duration
	DeclRange hcl.Range
}

// Throttle is `throttle {}`.
type Throttle struct {
	Key       *rules.Key // nil: one budget for the pipeline
	Limit     int
	Period    time.Duration
	DeclRange hcl.Range
}

// Dedupe is `dedupe {}`.
type Dedupe struct {
	Key    *rules.Key
	Window time.Duration
	// Lease is how long a claim stays taken by a process that stopped renewing it (crashed):
	// `lease`, default DefaultLease.
	Lease     time.Duration
	DeclRange hcl.Range
}

// DefaultLease is how long a crashed process can keep a concurrency key or a dedupe claim: the
// engine's, which the lease attribute's declaration holds.
const DefaultLease = engine.DefaultLease

// Lease is the shortest lease of the blocks that take one.
func (f *Flow) Lease() time.Duration {
	l := time.Duration(0)
	if f.Concurrency != nil {
		l = f.Concurrency.Lease
	}
	if f.Dedupe != nil && (l == 0 || f.Dedupe.Lease < l) {
		l = f.Dedupe.Lease
	}
	if l == 0 {
		l = DefaultLease
	}
	return l
}

// Blocks returns how many flow-control blocks are declared.
func (f *Flow) Blocks() int {
	if f == nil {
		return 0
	}
	n := 0
	if f.Concurrency != nil {
		n++
	}
	if f.Throttle != nil {
		n++
	}
	if f.Dedupe != nil {
		n++
	}
	return n
}

// The flow-control blocks (SPEC §13), documented; flowBlockSchemas decodes them.
var (
	leaseAttr = schema.Duration("lease").WithDefault(DefaultLease).
			Describe("How long a key stays taken by a process that stopped renewing it (it crashed). A running handler's lease is renewed every third of it and released the moment the handler finishes.")
	concurrencyKeyBody = &schema.Body{Attrs: []schema.Attr{
		{Name: "key", Type: "expression", Required: true, Doc: "The key value: an expression over the rules' environment (`\"payload.customer\"`), its result as a string. An error or `nil` counts as `retry`."},
		schema.Count("limit").Require().Describe("Handlers at once per key value. `1` also runs one key's deliveries in the order they were read, within one process (across processes there is no order)."),
		leaseAttr,
	}}
	throttleBody = &schema.Body{Attrs: []schema.Attr{
		schema.Count("limit").Require().Describe("Handler starts per `period` (a sliding window)."),
		schema.Duration("period").Require().Describe("The window `limit` counts starts in."),
		{Name: "key", Type: "expression", Default: "one budget for the pipeline", Doc: "A budget per key value: an expression, its result as a string. An error or `nil` counts as `retry`."},
	}}
	dedupeBody = &schema.Body{Attrs: []schema.Attr{
		{Name: "key", Type: "expression", Required: true, Doc: "The key value: an expression (`\"payload.order_id\"`), its result as a string. An error or `nil` counts as `retry`."},
		schema.Duration("window").Require().Describe("How long a key stays done after its message was acknowledged or dropped. A retry or dead letter releases the key."),
		leaseAttr,
	}}
)

// flowBodies are the flow-control blocks' bodies by block type.
var flowBodies = map[string]*schema.Body{
	"concurrency_key": concurrencyKeyBody,
	"throttle":        throttleBody,
	"dedupe":          dedupeBody,
}

var flowBlockSchemas = map[string]*hcl.BodySchema{
	"concurrency_key": concurrencyKeyBody.HCL(),
	"throttle":        throttleBody.HCL(),
	"dedupe":          dedupeBody.HCL(),
}

// decodeFlowBlocks decodes a pipeline's concurrency_key, throttle and dedupe blocks (at most one
// of each); nil when there are none.
func (d *fileDecoder) decodeFlowBlocks(blocks []*hcl.Block) (*Flow, hcl.Diagnostics) {
	if len(blocks) == 0 {
		return nil, nil
	}
	var diags hcl.Diagnostics
	f := &Flow{}
	seen := map[string]hcl.Range{}
	for _, b := range blocks {
		if prev, dup := seen[b.Type]; dup {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate " + b.Type + " block",
				Detail:   fmt.Sprintf("A pipeline has at most one %q block; the first is declared at %s.", b.Type, where(prev)),
				Subject:  b.DefRange.Ptr(),
			})
			continue
		}
		seen[b.Type] = b.DefRange
		content, ds := b.Body.Content(flowBlockSchemas[b.Type])
		diags = append(diags, ds...)
		attrs := content.Attributes
		v := d.values(attrs, flowBodies[b.Type].Attrs, &diags)
		// required reads a required attribute, reporting it at the block's header when missing.
		required := func(name string) {
			if v.Get(name); !v.Written(name) {
				diags = append(diags, missingArg(b, name, "in a "+b.Type+" block"))
			}
		}
		switch b.Type {
		case "concurrency_key":
			c := &ConcurrencyKey{DeclRange: b.DefRange}
			c.Key = d.flowKey(b, attrs, true, &diags)
			required("limit")
			c.Limit, c.Lease = v.Int("limit"), v.Duration("lease")
			f.Concurrency = c
		case "throttle":
			t := &Throttle{DeclRange: b.DefRange}
			t.Key = d.flowKey(b, attrs, false, &diags)
			required("limit")
			required("period")
			t.Limit, t.Period = v.Int("limit"), v.Duration("period")
			f.Throttle = t
		case "dedupe":
			x := &Dedupe{DeclRange: b.DefRange}
			x.Key = d.flowKey(b, attrs, true, &diags)
			required("window")
			x.Window, x.Lease = v.Duration("window"), v.Duration("lease")
			f.Dedupe = x
		}
	}
	return f, diags
}

// flowKey compiles a block's key expression with the rules' environment; its errors point
// inside the quoted string.
func (d *fileDecoder) flowKey(b *hcl.Block, attrs hcl.Attributes, required bool, diags *hcl.Diagnostics) *rules.Key {
	a, ok := attrs["key"]
	if !ok {
		if required {
			*diags = append(*diags, missingArg(b, "key", "in a "+b.Type+" block"))
		}
		return nil
	}
	es, ds := d.exprSource(a.Expr, `"key"`)
	*diags = append(*diags, ds...)
	if ds.HasErrors() {
		return nil
	}
	k, err := rules.CompileKey(es.text)
	if err != nil {
		*diags = append(*diags, es.compileDiag("Invalid "+b.Type+" key", err))
		return nil
	}
	return k
}
