package cli

import (
	"fmt"
	"io"
	"strings"
)

// diffContext is how many unchanged lines a hunk of unifiedDiff shows around a change.
const diffContext = 3

// maxDiffCells bounds the line-matching table of unifiedDiff (lines of a × lines of b, after the
// common head and tail are set aside); beyond it the middle is shown as replaced whole.
const maxDiffCells = 4 << 20

type diffOp struct {
	kind byte // ' ', '-' or '+'
	line string
}

// unifiedDiff writes the unified diff that turns a into b, under the headers `--- aName` and
// `+++ bName`; it writes nothing when a and b are equal.
func unifiedDiff(w io.Writer, aName, bName string, a, b []byte) {
	if string(a) == string(b) {
		return
	}
	ops := diffLines(strings.SplitAfter(string(a), "\n"), strings.SplitAfter(string(b), "\n"))
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", aName, bName)
	oldNo, newNo := make([]int, len(ops)+1), make([]int, len(ops)+1) // lines of a and b before op i
	for i, op := range ops {
		oldNo[i+1], newNo[i+1] = oldNo[i], newNo[i]
		if op.kind != '+' {
			oldNo[i+1]++
		}
		if op.kind != '-' {
			newNo[i+1]++
		}
	}
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(0, i-diffContext)
		end := i // one past the last change of the hunk
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				if j-end > 2*diffContext {
					break
				}
				end = j + 1
			}
		}
		stop := min(len(ops), end+diffContext)
		ol, nl := oldNo[stop]-oldNo[start], newNo[stop]-newNo[start]
		os, ns := oldNo[start], newNo[start]
		if ol > 0 {
			os++
		}
		if nl > 0 {
			ns++
		}
		fmt.Fprintf(&sb, "@@ -%d,%d +%d,%d @@\n", os, ol, ns, nl)
		for _, op := range ops[start:stop] {
			sb.WriteByte(op.kind)
			sb.WriteString(op.line)
			if !strings.HasSuffix(op.line, "\n") {
				sb.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = stop
	}
	io.WriteString(w, sb.String())
}

// diffLines matches the lines of a and b by a longest common subsequence.
func diffLines(a, b []string) []diffOp {
	if n := len(a); n > 0 && a[n-1] == "" {
		a = a[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == "" {
		b = b[:n-1]
	}
	var head, tail []diffOp
	for len(a) > 0 && len(b) > 0 && a[0] == b[0] {
		head = append(head, diffOp{' ', a[0]})
		a, b = a[1:], b[1:]
	}
	for len(a) > 0 && len(b) > 0 && a[len(a)-1] == b[len(b)-1] {
		tail = append([]diffOp{{' ', a[len(a)-1]}}, tail...)
		a, b = a[:len(a)-1], b[:len(b)-1]
	}
	ops := head
	if len(a)*len(b) > maxDiffCells {
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return append(ops, tail...)
	}
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	w := len(b) + 1
	lcs := make([]int32, (len(a)+1)*w)
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	return append(ops, tail...)
}
