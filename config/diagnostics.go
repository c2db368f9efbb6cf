package config

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
)

// WriteDiagnostics prints each diagnostic as `FILE:LINE:COL: error: SUMMARY: DETAIL` (or
// `warning:`), then, when the file is known, the offending source line and a caret line under
// the subject (`^~~~` spanning it on that line); blocks are separated by a blank line.
// files may be nil. Write errors are ignored: there is nowhere left to report them.
func WriteDiagnostics(w io.Writer, files map[string]*hcl.File, diags hcl.Diagnostics) {
	bw := bufio.NewWriter(w)
	for i, d := range diags {
		if i > 0 {
			bw.WriteString("\n")
		}
		sev := "error"
		if d.Severity == hcl.DiagWarning {
			sev = "warning"
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		if d.Subject == nil {
			fmt.Fprintf(bw, "%s: %s\n", sev, msg)
			continue
		}
		s := d.Subject
		fmt.Fprintf(bw, "%s:%d:%d: %s: %s\n", s.Filename, s.Start.Line, s.Start.Column, sev, msg)
		if f := files[s.Filename]; f != nil {
			writeSnippet(bw, f.Bytes, *s)
		}
	}
	bw.Flush() // a failing writer (a closed stderr) leaves nothing better to do
}

// JSONDiagnostic is one diagnostic as `validate --json` prints it, at the position the text form
// prints: a path that cannot be read is at 1:1 of that path (pathDiag), and only a diagnostic
// tied to no file has an empty file and line and col 0 (docs/commands.md).
type JSONDiagnostic struct {
	Severity string `json:"severity"` // "error" or "warning"
	File     string `json:"file"`
	Line     int    `json:"line"`
	Col      int    `json:"col"`
	Message  string `json:"message"` // SUMMARY: DETAIL, as in the text form
}

// WriteDiagnosticsJSON prints diags as a JSON array of JSONDiagnostic, `[]` when there are none,
// followed by a newline.
func WriteDiagnosticsJSON(w io.Writer, diags hcl.Diagnostics) error {
	out := make([]JSONDiagnostic, 0, len(diags))
	for _, d := range diags {
		j := JSONDiagnostic{Severity: "error", Message: d.Summary}
		if d.Severity == hcl.DiagWarning {
			j.Severity = "warning"
		}
		if d.Detail != "" {
			j.Message += ": " + d.Detail
		}
		if s := d.Subject; s != nil {
			j.File, j.Line, j.Col = s.Filename, s.Start.Line, s.Start.Column
		}
		out = append(out, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeSnippet prints the line holding rng's start and a caret line under rng (up to the end of
// that line). Tabs before the subject are kept so that the caret lines up.
func writeSnippet(w io.StringWriter, src []byte, rng hcl.Range) {
	start := rng.Start.Byte
	if start < 0 || start > len(src) {
		return
	}
	lineStart := strings.LastIndexByte(string(src[:start]), '\n') + 1
	lineEnd := len(src)
	if i := strings.IndexByte(string(src[start:]), '\n'); i >= 0 {
		lineEnd = start + i
	}
	line := strings.TrimRight(string(src[lineStart:lineEnd]), "\r")
	w.WriteString(line + "\n")

	var caret strings.Builder
	for _, r := range string(src[lineStart:start]) {
		if r == '\t' {
			caret.WriteByte('\t')
		} else {
			caret.WriteByte(' ')
		}
	}
	end := min(max(rng.End.Byte, start), lineStart+len(line))
	n := utf8.RuneCount(src[min(start, end):end])
	caret.WriteByte('^')
	for i := 1; i < n; i++ {
		caret.WriteByte('~')
	}
	w.WriteString(caret.String() + "\n")
}

// Format returns the file name's content src in canonical HCL layout (`flowrun fmt`). A file
// that does not parse is never formatted, since the layout of broken tokens would change what
// they mean (`rule "r` would become `rule " r "`): out is nil and diags hold the syntax errors,
// with file the source for their snippets (WriteDiagnostics).
func Format(name string, src []byte) (out []byte, file *hcl.File, diags hcl.Diagnostics) {
	file, diags = hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	if file == nil {
		file = &hcl.File{Bytes: src}
	}
	if diags.HasErrors() {
		return nil, file, diags
	}
	return hclwrite.Format(src), file, diags
}
