package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/flowrun/flowrun/engine"
)

var testSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "pipeline"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "message"}, {Type: "expect"}},
}

var messageSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "payload"}, {Name: "headers"}, {Name: "key"}, {Name: "attempt"}},
}

var expectSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "outcome"}, {Name: "emits"}},
}

var expectEmitFields = []string{"kind", "key", "payload"}

// decodeTestBlock decodes `test "NAME" {}` (SPEC §9). Its pipeline is resolved in the merge pass.
func (d *fileDecoder) decodeTestBlock(block *hcl.Block) (*Test, hcl.Diagnostics) {
	t := &Test{Name: block.Labels[0], DeclRange: block.DefRange, Message: TestMessage{Attempt: 1}}
	content, diags := block.Body.Content(testSchema)

	if a, ok := content.Attributes["pipeline"]; ok {
		v, ds := d.nonEmpty(a)
		diags = append(diags, ds...)
		t.Pipeline, t.pipelineRange = v, a.Expr.Range()
	} else {
		diags = append(diags, missingArg(block, "pipeline", "in a test block"))
	}

	var messages, expects []*hcl.Block
	for _, b := range content.Blocks {
		if b.Type == "message" {
			messages = append(messages, b)
		} else {
			expects = append(expects, b)
		}
	}
	if len(messages) > 0 {
		diags = append(diags, d.decodeTestMessage(messages[0], t)...)
	}
	for _, b := range messages[min(1, len(messages)):] {
		diags = append(diags, duplicateInner(b, "message"))
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
	opt(content.Attributes, "attempt", d.count, &m.Attempt, &diags)
	return diags
}

func (d *fileDecoder) decodeTestExpect(block *hcl.Block, e *TestExpect) hcl.Diagnostics {
	content, diags := block.Body.Content(expectSchema)
	if a, ok := content.Attributes["outcome"]; ok {
		v, ds := d.str(a)
		diags = append(diags, ds...)
		if !ds.HasErrors() {
			o, err := ParseOutcome(v)
			if err != nil {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Invalid outcome",
					Detail:   err.Error(),
					Subject:  a.Expr.Range().Ptr(),
				})
			}
			e.Outcome, e.Want = v, o
		}
	} else {
		diags = append(diags, missingArg(block, "outcome", "in an expect block"))
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

// ParseOutcome parses an outcome as a test expects it: "ack", "drop", "retry" (each optionally
// with "()"), or "retry_after(D)" with D a Go duration, bare or in single or double quotes.
func ParseOutcome(s string) (engine.Outcome, error) {
	bad := fmt.Errorf(`%q is not an outcome: write "ack", "drop", "retry" or "retry_after('5s')"`, s)
	t := strings.TrimSpace(s)
	name, arg := t, ""
	if i := strings.IndexByte(t, '('); i >= 0 {
		if !strings.HasSuffix(t, ")") {
			return engine.Outcome{}, bad
		}
		name, arg = strings.TrimSpace(t[:i]), strings.TrimSpace(t[i+1:len(t)-1])
	}
	switch name {
	case "ack", "drop", "retry":
		if arg != "" {
			return engine.Outcome{}, bad
		}
		return map[string]engine.Outcome{"ack": engine.Ack(), "drop": engine.Drop(), "retry": engine.Retry()}[name], nil
	case "retry_after":
		if len(arg) >= 2 && (arg[0] == '\'' || arg[0] == '"') && arg[len(arg)-1] == arg[0] {
			arg = arg[1 : len(arg)-1]
		}
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return engine.Outcome{}, fmt.Errorf("%q is not an outcome: retry_after needs a duration such as '5s'", s)
		}
		return engine.RetryAfter(d), nil
	}
	return engine.Outcome{}, bad
}

// resolveTest checks that a test names a pipeline with rules, and defaults its message key.
func resolveTest(t *Test, pipelines map[string]*Pipeline) hcl.Diagnostics {
	if t.Pipeline == "" {
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
	if pl.Handler != nil {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Untestable pipeline",
			Detail: fmt.Sprintf("Pipeline %q uses the Go handler %q; tests run against rules only.",
				pl.Name, pl.Handler.Name),
			Subject: t.pipelineRange.Ptr(),
		}}
	}
	if !t.keySet && pl.Source != nil {
		t.Message.Key = pl.Source.NaturalKey()
	}
	return nil
}
