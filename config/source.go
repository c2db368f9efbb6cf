package config

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// sourceKinds in the order SPEC §2 lists them.
var sourceKinds = []string{KindStream, KindClaiming, KindReclaim, KindList, KindPubSub, KindFile, KindPipe}

// sourceAttrs is what each source kind takes (SPEC §2 table).
var sourceAttrs = map[string][]string{
	KindStream:   {"redis", "stream", "group", "consumer", "start", "batch", "block"},
	KindClaiming: {"redis", "stream", "group", "consumer", "start", "batch", "block", "min_idle"},
	KindReclaim:  {"redis", "stream", "group", "consumer", "start", "batch", "block", "min_idle"},
	KindList:     {"redis", "key", "reliable", "consumer", "processing", "batch", "block"},
	KindPubSub:   {"redis", "channels", "patterns"},
	KindFile:     {"path", "key", "follow", "checkpoint"},
	KindPipe:     {"key"},
}

// sourceSchema is the union of every kind's attributes, so that a misspelt name gets hcl's own
// "Did you mean" and a name of another kind gets a message saying which kinds take it.
var sourceSchema = func() *hcl.BodySchema {
	s := &hcl.BodySchema{}
	seen := map[string]bool{}
	for _, k := range sourceKinds {
		for _, a := range sourceAttrs[k] {
			if !seen[a] {
				seen[a] = true
				s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: a})
			}
		}
	}
	return s
}()

// kindsTaking lists the source kinds that take an attribute.
func kindsTaking(attr string) []string {
	var kinds []string
	for _, k := range sourceKinds {
		for _, a := range sourceAttrs[k] {
			if a == attr {
				kinds = append(kinds, k)
			}
		}
	}
	return kinds
}

func article(kind string) string {
	if strings.IndexByte("aeiou", kind[0]) >= 0 {
		return "an"
	}
	return "a"
}

// decodeSourceBlock decodes `source "KIND" {}` with every default applied. It returns nil when
// the kind is unknown (the body is still checked for unknown attributes).
func (d *fileDecoder) decodeSourceBlock(block *hcl.Block, pipeline string) (*Source, hcl.Diagnostics) {
	kind := block.Labels[0]
	content, diags := block.Body.Content(sourceSchema)
	allowed, known := sourceAttrs[kind]
	if !known {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unknown source kind",
			Detail: fmt.Sprintf("There is no source kind %q.%s Source kinds are %s.",
				kind, didYouMean(kind, sourceKinds), quoteList(sourceKinds, "and")),
			Subject: block.LabelRanges[0].Ptr(),
		})
		return nil, diags
	}
	for _, name := range sortedKeys(content.Attributes) {
		ok := false
		for _, a := range allowed {
			ok = ok || a == name
		}
		if !ok {
			a := content.Attributes[name]
			diags = append(diags, notHere(a, fmt.Sprintf("%q is not valid on %s %s source; it is taken by %s sources.",
				name, article(kind), kind, quoteList(kindsTaking(name), "and"))))
			delete(content.Attributes, name)
		}
	}

	s := &Source{Kind: kind, DeclRange: block.DefRange}
	attrs := content.Attributes
	str := func(name string, dst *string) bool { return opt(attrs, name, d.nonEmpty, dst, &diags) }
	if a, ok := attrs["redis"]; ok {
		v, ds := d.nonEmpty(a)
		diags = append(diags, ds...)
		s.Redis, s.redisRange = v, a.Expr.Range()
	}

	if isStreamKind(kind) || kind == KindList {
		str("consumer", &s.Consumer)
		if s.Consumer == "" || d.override {
			s.Consumer = d.consumer
		}
		s.Batch = DefaultBatch
		opt(attrs, "batch", d.count, &s.Batch, &diags)
		s.Block = DefaultBlock
		opt(attrs, "block", d.positiveDuration, &s.Block, &diags)
	}

	switch kind {
	case KindStream, KindClaiming, KindReclaim:
		if !str("stream", &s.Stream) {
			diags = append(diags, missingArg(block, "stream", fmt.Sprintf("for %s %s source", article(kind), kind)))
		} else {
			s.streamRange = attrs["stream"].Expr.Range()
		}
		s.Group = pipeline
		str("group", &s.Group)
		s.Start = DefaultStart
		if a, ok := attrs["start"]; ok {
			v, ds := d.str(a)
			diags = append(diags, ds...)
			if !ds.HasErrors() && v != "0" && v != "$" {
				diags = append(diags, invalidValue(a, `"start" must be "0" (the whole backlog) or "$" (only new entries).`))
			}
			s.Start = v
		}
		if kind != KindStream {
			if !opt(attrs, "min_idle", d.positiveDuration, &s.MinIdle, &diags) {
				diags = append(diags, missingArg(block, "min_idle", fmt.Sprintf("for a %s source", kind)))
			}
		}

	case KindList:
		if !str("key", &s.Key) {
			diags = append(diags, missingArg(block, "key", "for a list source"))
		} else {
			s.keyRange = attrs["key"].Expr.Range()
		}
		s.Reliable = true
		opt(attrs, "reliable", d.boolean, &s.Reliable, &diags)
		hasProcessing := str("processing", &s.Processing)
		switch {
		case hasProcessing && !s.Reliable:
			diags = append(diags, notHere(attrs["processing"], `"processing" is only used by a reliable list (reliable = true).`))
			s.Processing = ""
		case !hasProcessing && s.Reliable && s.Key != "":
			s.Processing = fmt.Sprintf("%s:processing:%s", s.Key, s.Consumer)
		case hasProcessing:
			s.processingRange = attrs["processing"].Expr.Range().Ptr()
		}

	case KindPubSub:
		ch, hasCh := attrs["channels"]
		pa, hasPa := attrs["patterns"]
		switch {
		case hasCh && hasPa:
			second := pa
			if ch.NameRange.Start.Byte > pa.NameRange.Start.Byte {
				second = ch
			}
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Conflicting arguments",
				Detail:   `A pubsub source takes "channels" or "patterns", not both.`,
				Subject:  second.NameRange.Ptr(),
			})
		case !hasCh && !hasPa:
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Missing required argument",
				Detail:   `A pubsub source needs "channels" or "patterns" (a list).`,
				Subject:  block.DefRange.Ptr(),
			})
		}
		if hasCh {
			v, ds := d.strList(ch)
			diags = append(diags, ds...)
			s.Channels = v
		}
		if hasPa {
			v, ds := d.strList(pa)
			diags = append(diags, ds...)
			s.Patterns = v
		}

	case KindFile:
		if str("path", &s.Path) {
			if s.Path != "" {
				s.Path = resolvePath(d.dir, s.Path)
			}
		} else {
			diags = append(diags, missingArg(block, "path", "for a file source"))
		}
		if str("key", &s.Key) {
			s.keyRange = attrs["key"].Expr.Range()
		}
		opt(attrs, "follow", d.boolean, &s.Follow, &diags)
		if str("checkpoint", &s.Checkpoint) && s.Checkpoint != "" {
			s.Checkpoint = resolvePath(d.dir, s.Checkpoint)
		}

	case KindPipe:
		str("key", &s.Key)
	}
	return s, diags
}
