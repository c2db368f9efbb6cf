package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/rules"
	"github.com/flowrun/flowrun/schema"
)

// testBody is `test "NAME" {}` (SPEC §9), documented; testSchema decodes it.
var testBody = &schema.Body{
	Attrs: []schema.Attr{
		{Name: "pipeline", Type: "string", Required: true, Doc: "The pipeline whose rules or Go handler the test runs."},
	},
	Blocks: []schema.Block{
		{Type: "message", Occurs: "optional", Body: messageBody, Doc: "The message the test hands the pipeline."},
		{Type: "mock", Occurs: "one for an `http` or `exec` handler, else none", Ref: "handler-mocks",
			Doc: "Stands in for the server or the process of the pipeline's `http` or `exec` handler, so the test runs without any connection or process."},
		{Type: "expect", Occurs: "one", Body: expectBody, Doc: "What the pipeline must decide."},
	},
}

var messageBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "payload", Type: "string or any value", Default: "empty", Doc: "A string is the payload's bytes; any other value (`{ id = 1 }`) is written as its JSON text."},
	{Name: "headers", Type: "map of strings", Doc: "The message's headers."},
	{Name: "key", Type: "string", Default: "the source's key (its stream, list, only channel or key filter)", Doc: "The message's key."},
	testAttemptAttr,
}}

// testAttemptAttr is a test message's attempt; its default is also a test's without a message.
var testAttemptAttr = schema.Count("attempt").WithDefault(1).Describe("The attempt number the handler sees (`attempt` in rules).")

// delayBoundAttrs are an expect block's min_delay and max_delay.
var delayBoundAttrs = []schema.Attr{
	schema.Duration("min_delay").AllowZero().WithDefault(time.Duration(0)).Describe("With `outcome = \"retry_after\"`: the shortest delay that passes."),
	schema.Duration("max_delay").AllowZero().Describe("With `outcome = \"retry_after\"`: the longest delay that passes."),
}

var expectBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "outcome", Type: "string", Doc: "The expected outcome as a rule writes it: `\"ack\"`, `\"drop\"`, `\"retry\"`, `\"retry_after('5s')\"`, or `\"retry_after\"` for any delay; `\"dead_letter\"` for a Go handler that dead-letters. Required, unless the test checks flow-control keys only."},
	delayBoundAttrs[0],
	delayBoundAttrs[1],
	{Name: "reason", Type: "string", Doc: "With `outcome = \"dead_letter\"`: text the dead-letter reason must contain."},
	{Name: "emits", Type: "list of objects", Doc: "The expected emits, in order: `[{ kind = \"stream\", key = \"done\", payload = \"...\" }]` (`payload` optional, compared as JSON when it is JSON). `emits = []` asserts that nothing is emitted."},
	{Name: "key", Type: "string", Doc: "The flow-control key value of the pipeline's one flow-control block (`concurrency_key`, `throttle` or `dedupe`) for the test's message."},
	{Name: "concurrency_key", Type: "string", Doc: "The key value of the pipeline's `concurrency_key` block, where it declares more than one flow-control block."},
	{Name: "throttle_key", Type: "string", Doc: "The key value of the pipeline's `throttle` block (one with a `key`), where it declares more than one flow-control block."},
	{Name: "dedupe_key", Type: "string", Doc: "The key value of the pipeline's `dedupe` block, where it declares more than one flow-control block."},
}}

var (
	testSchema    = testBody.HCL()
	messageSchema = messageBody.HCL()
	expectSchema  = expectBody.HCL()
)

var expectEmitFields = []string{"kind", "key", "payload"}

// decodeTestBlock decodes `test "NAME" {}` (SPEC §9). Its pipeline is resolved in the merge pass.
func (d *fileDecoder) decodeTestBlock(block *hcl.Block) (*Test, hcl.Diagnostics) {
	if namesWorkflow(block) {
		return d.decodeWorkflowTest(block)
	}
	t := &Test{Name: block.Labels[0], DeclRange: block.DefRange, Message: TestMessage{Attempt: testAttemptAttr.Value.(int)}}
	content, diags := block.Body.Content(testSchema)

	if a, ok := content.Attributes["pipeline"]; ok {
		v, ds := d.nonEmpty(a)
		diags = append(diags, ds...)
		t.Pipeline, t.pipelineRange = v, a.Expr.Range()
	} else {
		diags = append(diags, missingArg(block, "pipeline", "in a test block"))
	}

	var messages, mocks, expects []*hcl.Block
	for _, b := range content.Blocks {
		switch b.Type {
		case "message":
			messages = append(messages, b)
		case "mock":
			mocks = append(mocks, b)
		default:
			expects = append(expects, b)
		}
	}
	if len(messages) > 0 {
		diags = append(diags, d.decodeTestMessage(messages[0], t)...)
	}
	for _, b := range messages[min(1, len(messages)):] {
		diags = append(diags, duplicateInner(b, "message"))
	}
	// A mock is decoded by the pipeline's handler, known in the merge pass.
	if len(mocks) > 0 {
		t.mock, t.mockCtx = mocks[0], d.ctx
	}
	for _, b := range mocks[min(1, len(mocks)):] {
		diags = append(diags, duplicateInner(b, "mock"))
	}
	if len(expects) == 0 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing expect block",
			Detail:   `A test needs an "expect" block with the outcome it expects.`,
			Subject:  block.DefRange.Ptr(),
		})
	} else {
		t.ExpectRange = expects[0].DefRange
		diags = append(diags, d.decodeTestExpect(expects[0], &t.Expect)...)
		for _, b := range expects[1:] {
			diags = append(diags, duplicateInner(b, "expect"))
		}
	}
	return t, diags
}

func (d *fileDecoder) decodeTestMessage(block *hcl.Block, t *Test) hcl.Diagnostics {
	content, diags := block.Body.Content(messageSchema)
	m := &t.Message
	if a, ok := content.Attributes["payload"]; ok {
		v, ds := d.value(a, cty.DynamicPseudoType, "a string or a JSON-like value")
		diags = append(diags, ds...)
		if v != cty.NilVal {
			p, err := payloadText(v)
			if err != nil {
				diags = append(diags, invalidValue(a, fmt.Sprintf("The payload cannot be written as JSON: %s.", err)))
			}
			m.Payload = []byte(p)
		}
	}
	if a, ok := content.Attributes["headers"]; ok {
		v, ds := d.value(a, cty.Map(cty.String), "a map of strings")
		diags = append(diags, ds...)
		if v != cty.NilVal {
			m.Headers = map[string]string{}
			for k, hv := range v.AsValueMap() {
				if hv.IsNull() {
					diags = append(diags, invalidValue(a, fmt.Sprintf("Header %q must not be null.", k)))
					continue
				}
				m.Headers[k] = hv.AsString()
			}
		}
	}
	if a, ok := content.Attributes["key"]; ok {
		v, ds := d.str(a)
		diags = append(diags, ds...)
		m.Key, t.keySet = v, true
	}
	if v := d.values(content.Attributes, []schema.Attr{testAttemptAttr}, &diags); v.Written("attempt") {
		m.Attempt = v.Int("attempt")
	}
	return diags
}

func (d *fileDecoder) decodeTestExpect(block *hcl.Block, e *TestExpect) hcl.Diagnostics {
	content, diags := block.Body.Content(expectSchema)
	parsed := false
	if a, ok := content.Attributes["outcome"]; ok {
		e.outcomeRange = a.Expr.Range()
		v, ds := d.str(a)
		diags = append(diags, ds...)
		if !ds.HasErrors() {
			o, anyDelay, err := ParseOutcome(v)
			if err != nil {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Invalid outcome",
					Detail:   err.Error(),
					Subject:  a.Expr.Range().Ptr(),
				})
			}
			e.Outcome, e.Want, e.AnyDelay, parsed = v, o, anyDelay, err == nil
		}
	}

	// Flow-control keys (SPEC §13); checked against the pipeline's blocks in the merge pass.
	for _, name := range flowKeyAttrs {
		a, ok := content.Attributes[name]
		if !ok {
			continue
		}
		v, ds := d.str(a)
		diags = append(diags, ds...)
		e.Keys = append(e.Keys, ExpectKey{Attr: name, Want: v, rng: a.NameRange})
	}
	if _, ok := content.Attributes["outcome"]; !ok && len(e.Keys) == 0 {
		diags = append(diags, missingArg(block, "outcome", "in an expect block"))
	}

	// min_delay and max_delay bound a retry_after written without a duration.
	var minAttr *hcl.Attribute
	bounds := d.values(content.Attributes, delayBoundAttrs, &diags)
	for _, name := range []string{"min_delay", "max_delay"} {
		a := bounds.Attr(name)
		if a == nil {
			continue
		}
		dur := bounds.Duration(name)
		switch {
		case parsed && e.Want.Kind != engine.KindRetryAfter:
			diags = append(diags, notHere(a, fmt.Sprintf(
				`%q bounds the delay of a retry_after outcome; this test expects %q.`, name, e.Outcome)))
		case parsed && !e.AnyDelay:
			diags = append(diags, notHere(a, fmt.Sprintf(
				`%q bounds a retry_after written without a duration; %q expects exactly %s. Write outcome = "retry_after" to accept any delay within the bounds.`,
				name, e.Outcome, e.Want.Delay)))
		case !bounds.OK(name):
		case name == "min_delay":
			e.MinDelay, minAttr = dur, a
		default:
			e.MaxDelay, e.HasMaxDelay = dur, true
		}
	}
	if minAttr != nil && e.HasMaxDelay && e.MinDelay > e.MaxDelay {
		diags = append(diags, invalidValue(minAttr, fmt.Sprintf(
			`"min_delay" (%s) must not exceed "max_delay" (%s).`, e.MinDelay, e.MaxDelay)))
	}

	if a, ok := content.Attributes["reason"]; ok {
		v, ds := d.str(a)
		diags = append(diags, ds...)
		if parsed && e.Want.Kind != engine.KindDeadLetter {
			diags = append(diags, notHere(a, fmt.Sprintf(
				`"reason" is the reason of a dead_letter outcome; this test expects %q.`, e.Outcome)))
		}
		e.Reason = v
	}

	if a, ok := content.Attributes["emits"]; ok {
		e.HasEmits = true
		emits, ds := d.decodeExpectEmits(a)
		diags = append(diags, ds...)
		e.Emits = emits
	}
	return diags
}

// decodeExpectEmits decodes `emits = [{ kind = "stream", key = "done", payload = ... }, ...]`,
// pointing at the element at fault when the list is written out.
func (d *fileDecoder) decodeExpectEmits(attr *hcl.Attribute) ([]TestEmit, hcl.Diagnostics) {
	v, diags := d.value(attr, cty.DynamicPseudoType, "a list of emits")
	if v == cty.NilVal {
		return nil, diags
	}
	if !v.Type().IsListType() && !v.Type().IsTupleType() {
		return nil, append(diags, typeDiag(attr, `a list of objects such as { kind = "stream", key = "done" }`))
	}
	ranges := make([]hcl.Range, v.LengthInt())
	for i := range ranges {
		ranges[i] = attr.Expr.Range()
	}
	if elems, ds := hcl.ExprList(attr.Expr); !ds.HasErrors() && len(elems) == len(ranges) {
		for i, el := range elems {
			ranges[i] = el.Range()
		}
	}
	var out []TestEmit
	i := 0
	for it := v.ElementIterator(); it.Next(); i++ {
		_, el := it.Element()
		em, ds := expectEmit(el, ranges[i], d.schemas.emitNames)
		diags = append(diags, ds...)
		out = append(out, em)
	}
	return out, diags
}

// expectEmit decodes one expected emit; emitKinds are the registered emit kinds' names.
func expectEmit(v cty.Value, rng hcl.Range, emitKinds []string) (TestEmit, hcl.Diagnostics) {
	var em TestEmit
	var diags hcl.Diagnostics
	bad := func(detail string) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid expected emit", Detail: detail, Subject: rng.Ptr()})
	}
	if v.IsNull() || !(v.Type().IsObjectType() || v.Type().IsMapType()) {
		bad(`An expected emit is an object such as { kind = "stream", key = "done", payload = "..." }.`)
		return em, diags
	}
	fields := map[string]cty.Value{}
	for it := v.ElementIterator(); it.Next(); {
		k, fv := it.Element()
		fields[k.AsString()] = fv
	}
	for _, name := range sortedKeys(fields) {
		known := false
		for _, f := range expectEmitFields {
			known = known || f == name
		}
		if !known {
			bad(fmt.Sprintf("An expected emit has no field %q.%s Its fields are %s.",
				name, didYouMean(name, expectEmitFields), quoteList(expectEmitFields, "and")))
		}
	}
	str := func(name string) string {
		fv, ok := fields[name]
		if !ok {
			bad(fmt.Sprintf("An expected emit needs %q.", name))
			return ""
		}
		s, err := convertString(fv)
		if err != nil {
			bad(fmt.Sprintf("%q must be a string.", name))
			return ""
		}
		return s.AsString()
	}
	em.Kind = str("kind")
	if em.Kind != "" {
		known := false
		for _, k := range emitKinds {
			known = known || k == em.Kind
		}
		if !known {
			bad(fmt.Sprintf("There is no emit kind %q.%s Emit kinds are %s.",
				em.Kind, didYouMean(em.Kind, emitKinds), quoteList(emitKinds, "and")))
		}
	}
	em.Key = str("key")
	if pv, ok := fields["payload"]; ok {
		p, err := payloadText(pv)
		if err != nil {
			bad(fmt.Sprintf("The payload cannot be written as JSON: %s.", err))
		}
		em.Payload, em.HasPayload = p, true
	}
	return em, diags
}

// payloadText is a payload as written in a test: a string as its bytes, null as nothing, any
// other value as its JSON text.
func payloadText(v cty.Value) (string, error) {
	if v.IsNull() {
		return "", nil
	}
	if v.Type() == cty.String {
		return v.AsString(), nil
	}
	b, err := ctyjson.Marshal(v, v.Type())
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// ParseOutcome parses an outcome as a test expects it: "ack", "drop", "retry", "dead_letter"
// (each optionally with "()"), "retry_after" (or "retry_after()"), which matches any delay and
// comes back with anyDelay set, or "retry_after(D)" with D a Go duration, bare or in single or
// double quotes, which matches exactly D.
func ParseOutcome(s string) (o engine.Outcome, anyDelay bool, err error) {
	bad := fmt.Errorf(`%q is not an outcome: write "ack", "drop", "retry", "retry_after", "retry_after('5s')" or "dead_letter"`, s)
	t := strings.TrimSpace(s)
	name, arg := t, ""
	if i := strings.IndexByte(t, '('); i >= 0 {
		if !strings.HasSuffix(t, ")") {
			return engine.Outcome{}, false, bad
		}
		name, arg = strings.TrimSpace(t[:i]), strings.TrimSpace(t[i+1:len(t)-1])
	}
	switch name {
	case "ack", "drop", "retry", "dead_letter":
		if arg != "" {
			return engine.Outcome{}, false, bad
		}
		return map[string]engine.Outcome{
			"ack": engine.Ack(), "drop": engine.Drop(), "retry": engine.Retry(), "dead_letter": engine.DeadLetter(""),
		}[name], false, nil
	case "retry_after":
		if arg == "" {
			return engine.RetryAfter(0), true, nil
		}
		if len(arg) >= 2 && (arg[0] == '\'' || arg[0] == '"') && arg[len(arg)-1] == arg[0] {
			arg = arg[1 : len(arg)-1]
		}
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return engine.Outcome{}, false, fmt.Errorf(
				`%q is not an outcome: retry_after takes a duration such as '5s', or none to accept any delay`, s)
		}
		return engine.RetryAfter(d), false, nil
	}
	return engine.Outcome{}, false, bad
}

// Matches reports whether o is the outcome the test expects: the same kind; for retry_after the
// same delay, or, written without one, any delay within min_delay and max_delay; for dead_letter
// a reason that contains the expected one.
func (e *TestExpect) Matches(o engine.Outcome) bool {
	if e.Outcome == "" {
		return true // the test checks keys only
	}
	if o.Kind != e.Want.Kind {
		return false
	}
	switch o.Kind {
	case engine.KindRetryAfter:
		if !e.AnyDelay {
			return o.Delay == e.Want.Delay
		}
		return o.Delay >= e.MinDelay && (!e.HasMaxDelay || o.Delay <= e.MaxDelay)
	case engine.KindDeadLetter:
		return strings.Contains(o.Reason, e.Reason)
	}
	return true
}

// String is the expected outcome as written, with its bounds or reason: "ack",
// "retry_after('5s')", "retry_after with a delay of 5s to 10s", `dead_letter with a reason
// containing "http 400"`.
func (e *TestExpect) String() string {
	switch {
	case e.Want.Kind == engine.KindRetryAfter && e.AnyDelay:
		switch {
		case e.HasMaxDelay && e.MinDelay > 0:
			return fmt.Sprintf("retry_after with a delay of %s to %s", e.MinDelay, e.MaxDelay)
		case e.HasMaxDelay:
			return fmt.Sprintf("retry_after with a delay of at most %s", e.MaxDelay)
		case e.MinDelay > 0:
			return fmt.Sprintf("retry_after with a delay of at least %s", e.MinDelay)
		}
		return "retry_after with any delay"
	case e.Want.Kind == engine.KindDeadLetter && e.Reason != "":
		return fmt.Sprintf("dead_letter with a reason containing %q", e.Reason)
	}
	return e.Outcome
}

// resolveTest checks that a test names a pipeline, decodes its mock with the pipeline's handler,
// and defaults its message key.
func resolveTest(t *Test, pipelines map[string]*Pipeline) hcl.Diagnostics {
	if t.Pipeline == "" || t.Run != nil {
		return nil // reported as missing or empty already
	}
	pl, ok := pipelines[t.Pipeline]
	if !ok {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Unknown pipeline",
			Detail:   fmt.Sprintf("There is no pipeline named %q.%s", t.Pipeline, didYouMean(t.Pipeline, sortedKeys(pipelines))),
			Subject:  t.pipelineRange.Ptr(),
		}}
	}
	if !t.keySet && pl.Source != nil {
		t.Message.Key = pl.Source.NaturalKey()
	}
	diags := resolveExpectKeys(t, pl)
	switch {
	case pl.Handler != nil:
		diags = append(diags, resolveMock(t, pl)...)
	case pl.Rules != nil:
		if t.mock != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unexpected mock block",
				Detail: fmt.Sprintf("Pipeline %q decides with rules, which call nothing outside; a mock stands in for "+
					"the server or the process of a handler such as %s.", pl.Name, quoteList(handlers.Mockable(), "or")),
				Subject: t.mock.DefRange.Ptr(),
			})
		}
		if t.Expect.Want.Kind == engine.KindDeadLetter && t.Expect.Outcome != "" {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid outcome",
				Detail: fmt.Sprintf("Pipeline %q decides with rules, whose outcomes are ack, drop, retry and retry_after; "+
					"only a Go handler dead-letters a message itself.", pl.Name),
				Subject: t.Expect.outcomeRange.Ptr(),
			})
		}
	}
	return diags
}

// resolveMock decodes a test's mock block with the pipeline's handler, or reports that the
// handler takes none, or needs one.
func resolveMock(t *Test, pl *Pipeline) hcl.Diagnostics {
	h := pl.Handler
	decode := h.Plugin.DecodeMock
	switch {
	case t.mock == nil && decode == nil:
		return nil // the handler runs as compiled
	case t.mock == nil:
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Missing mock block",
			Detail: fmt.Sprintf("Pipeline %q uses the %s handler, which calls out; a test of it needs a mock block "+
				"to stand in for what it calls, so that it runs without any connection or process.", pl.Name, h.Name),
			Subject: t.DeclRange.Ptr(),
		}}
	case decode == nil:
		detail := fmt.Sprintf("Pipeline %q uses the Go handler %q, which cannot be mocked: a test runs it as compiled.", pl.Name, h.Name)
		if names := handlers.Mockable(); len(names) > 0 {
			detail += fmt.Sprintf(" Handlers that take a mock: %s.", quoteList(names, "and"))
		}
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Unexpected mock block",
			Detail:   detail,
			Subject:  t.mock.DefRange.Ptr(),
		}}
	}
	m, diags := decode(t.mock.Body, t.mockCtx, t.mock.DefRange)
	t.Mock = m
	return diags
}

// flowKeyAttrs are the expect attributes that check a flow-control key (SPEC §13).
var flowKeyAttrs = []string{"key", "concurrency_key", "throttle_key", "dedupe_key"}

// ExpectKey is one expected flow-control key: `key = "..."` (the pipeline's only block) or
// `concurrency_key`, `throttle_key`, `dedupe_key`.
type ExpectKey struct {
	Attr string // as written
	Want string
	// Key is the block's compiled expression, resolved in the merge pass.
	Key *rules.Key
	rng hcl.Range
}

// resolveExpectKeys finds the block each expected key checks.
func resolveExpectKeys(t *Test, pl *Pipeline) hcl.Diagnostics {
	var diags hcl.Diagnostics
	f := pl.Flow
	var declared []string
	if f != nil {
		if f.Concurrency != nil {
			declared = append(declared, "concurrency_key")
		}
		if f.Throttle != nil {
			declared = append(declared, "throttle")
		}
		if f.Dedupe != nil {
			declared = append(declared, "dedupe")
		}
	}
	for i := range t.Expect.Keys {
		k := &t.Expect.Keys[i]
		fail := func(detail string) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid expected key", Detail: detail, Subject: k.rng.Ptr()})
		}
		block := strings.TrimSuffix(k.Attr, "_key")
		if k.Attr == "concurrency_key" {
			block = "concurrency_key"
		}
		switch {
		case len(declared) == 0:
			fail(fmt.Sprintf("Pipeline %q declares no flow control (concurrency_key, throttle or dedupe), so it has no key to check.", pl.Name))
			continue
		case k.Attr == "key" && len(declared) > 1:
			fail(fmt.Sprintf("Pipeline %q declares %s; say which key this is with concurrency_key, throttle_key or dedupe_key.", pl.Name, quoteList(declared, "and")))
			continue
		case k.Attr == "key":
			block = declared[0]
		}
		switch block {
		case "concurrency_key":
			if f.Concurrency != nil {
				k.Key = f.Concurrency.Key
			}
		case "throttle":
			if f.Throttle != nil {
				k.Key = f.Throttle.Key
				if k.Key == nil {
					fail(fmt.Sprintf("The throttle of pipeline %q has no key: one budget covers every message.", pl.Name))
					continue
				}
			}
		case "dedupe":
			if f.Dedupe != nil {
				k.Key = f.Dedupe.Key
			}
		}
		if k.Key == nil {
			fail(fmt.Sprintf("Pipeline %q declares no %s block; it declares %s.", pl.Name, block, quoteList(declared, "and")))
		}
	}
	return diags
}
