package config

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/flowrun/flowrun/rules"
)

// exprSource is the text of an expression attribute (when, outcome, ...) and where each of its
// characters sits in the HCL file.
type exprSource struct {
	text string
	rng  hcl.Range // the whole HCL expression, quotes included
	// pos holds the file position of each rune of text plus one past the last; nil when the text
	// is not a plain literal (escapes, interpolation, function calls), and errors then point at rng.
	pos []hcl.Pos
}

// exprSource reads an expression string. A quoted or heredoc literal without escape sequences
// maps exactly onto the file; anything else (env(), "${...}", escapes) is evaluated to a string
// and its errors point at the start of the HCL expression.
func (d *fileDecoder) exprSource(expr hcl.Expression, name string) (exprSource, hcl.Diagnostics) {
	es := exprSource{rng: expr.Range()}
	if te, ok := expr.(*hclsyntax.TemplateExpr); ok && len(te.Parts) > 0 {
		if text, pos, ok := d.literalPositions(te); ok {
			es.text, es.pos = text, pos
			return es, nil
		}
	}
	v, diags := expr.Value(d.ctx)
	if diags.HasErrors() {
		return es, diags
	}
	if !v.IsNull() {
		v, _ = convert.Convert(v, cty.String)
	}
	if v == cty.NilVal || v.IsNull() || !v.IsKnown() {
		return es, append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Incorrect attribute value type",
			Detail:   fmt.Sprintf("Inappropriate value for %s: a string holding an expression is required.", name),
			Subject:  es.rng.Ptr(),
		})
	}
	es.text = v.AsString()
	return es, diags
}

// literalPositions maps a template made only of literal parts whose source bytes equal their
// value (no escapes, no heredoc indent stripping).
func (d *fileDecoder) literalPositions(te *hclsyntax.TemplateExpr) (string, []hcl.Pos, bool) {
	var text []byte
	var pos []hcl.Pos
	var end hcl.Pos
	for _, part := range te.Parts {
		lit, ok := part.(*hclsyntax.LiteralValueExpr)
		if !ok || lit.Val.Type() != cty.String || lit.Val.IsNull() {
			return "", nil, false
		}
		r := lit.SrcRange
		if r.Start.Byte < 0 || r.End.Byte > len(d.src) || r.Start.Byte > r.End.Byte {
			return "", nil, false
		}
		raw := d.src[r.Start.Byte:r.End.Byte]
		if string(raw) != lit.Val.AsString() {
			return "", nil, false
		}
		p := r.Start
		for i := 0; i < len(raw); {
			rn, size := utf8.DecodeRune(raw[i:])
			pos = append(pos, p)
			p.Byte += size
			if rn == '\n' {
				p.Line++
				p.Column = 1
			} else {
				p.Column++
			}
			i += size
		}
		text = append(text, raw...)
		end = p
	}
	return string(text), append(pos, end), true
}

// subject is the file range of the token at (line, col), 1-based inside the expression text.
func (e exprSource) subject(line, col int) (hcl.Range, bool) {
	if e.pos == nil || line < 1 || col < 1 {
		return e.rng, false
	}
	runes := []rune(e.text)
	if len(runes) == 0 {
		return e.rng, true // an empty string: point at the quotes
	}
	i, l, c := 0, 1, 1
	for i < len(runes) && (l < line || (l == line && c < col)) {
		if runes[i] == '\n' {
			if l == line {
				break // column past the end of this line: point at its end
			}
			l, c = l+1, 1
		} else {
			c++
		}
		i++
	}
	start := e.pos[i]
	if i == len(runes) {
		// Past the end (an unexpected end of input): point at the closing quote.
		end := start
		end.Byte++
		end.Column++
		return hcl.Range{Filename: e.rng.Filename, Start: start, End: end}, true
	}
	// Underline the whole token at the start: a name, or a quoted string.
	j := i + 1
	switch q := runes[i]; {
	case isIdentRune(q):
		for j < len(runes) && isIdentRune(runes[j]) {
			j++
		}
	case q == '\'' || q == '"' || q == '`':
		for k := i + 1; k < len(runes) && runes[k] != '\n'; k++ {
			if runes[k] == '\\' && q != '`' {
				k++
				continue
			}
			if runes[k] == q {
				j = k + 1
				break
			}
		}
	}
	return hcl.Range{Filename: e.rng.Filename, Start: start, End: e.pos[j]}, true
}

func isIdentRune(r rune) bool {
	return r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// locator maps positions in the expression's text to "FILE:LINE:COL", for run-time errors.
func (e exprSource) locator() rules.Locator {
	return func(line, col int) string {
		rng, _ := e.subject(line, col)
		return fmt.Sprintf("%s:%d:%d", rng.Filename, rng.Start.Line, rng.Start.Column)
	}
}

// compileDiag turns a rules compile error into a diagnostic at its place in the file.
func (e exprSource) compileDiag(summary string, err error) *hcl.Diagnostic {
	var re *rules.Error
	if !errors.As(err, &re) {
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: err.Error(), Subject: e.rng.Ptr()}
	}
	rng, exact := e.subject(re.Line, re.Column)
	detail := re.Message
	if !exact && re.Line > 0 {
		detail = fmt.Sprintf("%s (at line %d, column %d of the expression)", re.Message, re.Line, re.Column)
	}
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: &rng}
}

// mayRetry reports whether an outcome expression can produce retry or retry_after: outcome
// values only come from those names, so an expression that never mentions them (outside string
// literals) cannot. Any mention counts, which errs on the side of true. (A run-time
// evaluation error also counts as retry, SPEC §4; that is not counted here.)
func mayRetry(src string) bool {
	bare, after := retryNames(src)
	return bare || after
}

// retryNames reports whether src names the bare retry outcome (`retry`, `retry()`) and whether
// it names retry_after, judged from the identifiers it uses outside string literals.
func retryNames(src string) (bare, after bool) {
	if strings.Contains(src, "$env") {
		return true, true // $env['retry'] reaches the names through a string
	}
	for i := 0; i < len(src); {
		ch := src[i]
		switch {
		case ch == '\'' || ch == '"' || ch == '`':
			i++
			for i < len(src) && src[i] != ch {
				if src[i] == '\\' && ch != '`' {
					i++
				}
				i++
			}
			i++
		case isIdentRune(rune(ch)):
			j := i
			for j < len(src) && isIdentRune(rune(src[j])) {
				j++
			}
			switch src[i:j] {
			case "retry":
				bare = true
			case "retry_after":
				after = true
			}
			i = j
		default:
			i++
		}
	}
	return bare, after
}
