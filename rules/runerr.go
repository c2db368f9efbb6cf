package rules

// Run-time rule errors a user can act on (SPEC §7: a run-time evaluation error counts as retry):
// where in the file the failing part of the expression is, which rule, and what the types were,
// with a short value, e.g.
//
//	payouts.hcl:12:15: rule "big": payload.amount is a string ("abc"), compared with a number
//
// Compile records, for each operation that can fail on the types it meets (a comparison, an
// arithmetic operator, a field read), where its text starts and what its operands say; when the
// VM fails at one, the operands are evaluated again on their own to name their types and values.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/expr-lang/expr/ast"
)

// Locator maps a position inside an expression's text (1-based line and column) to where it is
// in its file, "FILE:LINE:COL". Config sets one on every expression it compiles.
type Locator func(line, col int) string

// SetLocator makes run-time errors of the expression name their place in the file.
func (p *program) SetLocator(l Locator) { p.locate = l }

// opInfo is one operation of an expression that can fail at run time for its operands' types.
type opInfo struct {
	start       int    // rune offset where the operation's text starts
	op          string // the operator, or "." for a field read
	left, right string // operand texts; a field read's object and the whole read
	leftLit     bool   // the left operand is a literal
	rightLit    bool

	once      sync.Once
	leftProg  *Value // compiled on first use; nil when the text does not compile on its own
	rightProg *Value
}

var typedOps = map[string]string{
	"<": "compared with", ">": "compared with", "<=": "compared with", ">=": "compared with",
	"+": "added to", "-": "in a subtraction with", "*": "multiplied by", "/": "divided by",
	"%": "in a modulo with", "**": "raised to", "^": "raised to",
}

// record notes n, an operation of the expression as written, for runError.
func (p *patcher) record(n ast.Node) {
	if p.ops == nil {
		p.ops = map[int]*opInfo{}
	}
	switch n := n.(type) {
	case *ast.BinaryNode:
		if _, ok := typedOps[n.Operator]; !ok {
			return
		}
		p.ops[n.Location().From] = &opInfo{start: startOf(n), op: n.Operator,
			left: p.text(n.Left), right: p.text(n.Right), leftLit: isLiteral(n.Left), rightLit: isLiteral(n.Right)}
	case *ast.MemberNode:
		if n.Method {
			return
		}
		p.ops[n.Location().From] = &opInfo{start: startOf(n), op: ".", left: p.text(n.Node), right: p.text(n)}
	}
}

func isLiteral(n ast.Node) bool {
	switch n.(type) {
	case *ast.IntegerNode, *ast.FloatNode, *ast.StringNode, *ast.BoolNode, *ast.NilNode, *ast.ConstantNode:
		return true
	}
	return false
}

// text is the source text of n's subtree, brackets it opened included.
func (p *patcher) text(n ast.Node) string {
	from, to := startOf(n), endOf(n)
	if from < 0 || to > len(p.src) || from >= to {
		return ""
	}
	for open := 0; ; to++ {
		open = strings.Count(string(p.src[from:to]), "[") - strings.Count(string(p.src[from:to]), "]") +
			strings.Count(string(p.src[from:to]), "(") - strings.Count(string(p.src[from:to]), ")")
		if open <= 0 || to >= len(p.src) {
			break
		}
	}
	return strings.TrimSpace(string(p.src[from:to]))
}

// endOf is the rune offset where n's subtree's text ends.
func endOf(n ast.Node) int {
	v := &maxLoc{max: n.Location().To}
	ast.Walk(&n, v)
	return v.max
}

type maxLoc struct{ max int }

func (m *maxLoc) Visit(node *ast.Node) {
	if to := (*node).Location().To; to > m.max {
		m.max = to
	}
}

// explain fills e's Reason and Kind from the operation the VM failed at, evaluating its operands
// again on s, and points e at the operation's start.
func (p *program) explain(e *EvalError, from int, s *state) {
	op := p.ops[from]
	if op == nil {
		return
	}
	pos := errorAt(p.src, op.start, "")
	e.Line, e.Column = pos.Line, pos.Column
	op.once.Do(func() {
		if v, err := CompileValue(op.left); err == nil && !op.leftLit {
			op.leftProg = v
		}
		if v, err := CompileValue(op.right); err == nil && !op.rightLit && op.op != "." {
			op.rightProg = v
		}
	})
	lv, lok := operand(op.leftProg, op.left, op.leftLit, s)
	if op.op == "." {
		switch lv.(type) {
		case map[string]any, map[string]string, []any:
			return // the object is one: the error is another (an index out of range)
		}
		if !lok {
			return
		}
		e.Kind = fmt.Sprintf("%s is %s, so %s cannot be read (%s ?? default gives the default)",
			op.left, typeOf(lv), op.right, op.right)
		e.Reason = fmt.Sprintf("%s is %s%s, so %s cannot be read (%s ?? default gives the default)",
			op.left, typeOf(lv), short(lv), op.right, op.right)
		return
	}
	rv, rok := operand(op.rightProg, op.right, op.rightLit, s)
	if !lok || !rok || !strings.HasPrefix(e.Message, "invalid operation") {
		return
	}
	verb := typedOps[op.op]
	switch {
	case op.rightLit && !op.leftLit:
		e.Kind = fmt.Sprintf("%s is %s, %s %s", op.left, typeOf(lv), verb, typeOf(rv))
		e.Reason = fmt.Sprintf("%s is %s%s, %s %s", op.left, typeOf(lv), short(lv), verb, typeOf(rv))
	case op.leftLit && !op.rightLit:
		e.Kind = fmt.Sprintf("%s is %s, %s %s", op.right, typeOf(rv), verb, typeOf(lv))
		e.Reason = fmt.Sprintf("%s is %s%s, %s %s", op.right, typeOf(rv), short(rv), verb, typeOf(lv))
	default:
		e.Kind = fmt.Sprintf("%s is %s and %s is %s: %s %s %s fails", op.left, typeOf(lv), op.right, typeOf(rv), op.left, op.op, op.right)
		e.Reason = fmt.Sprintf("%s is %s%s and %s is %s%s: %s %s %s fails", op.left, typeOf(lv), short(lv),
			op.right, typeOf(rv), short(rv), op.left, op.op, op.right)
	}
}

// operand is an operand's value: a literal's, or what its own program gives on s.
func operand(v *Value, text string, lit bool, s *state) (any, bool) {
	if lit {
		c, err := CompileValue(text)
		if err != nil || c.direct == nil {
			return nil, false
		}
		return c.direct(s.d), true
	}
	if v == nil {
		return nil, false
	}
	out, err := v.program.runPlain(s)
	return out, err == nil
}

// typeOf names a value's type as a user reads JSON: a string, a number, an object.
func typeOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case int, int64, float64, float32, int32, uint, uint64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any, map[string]string:
		return "an object"
	case time.Duration:
		return "a duration"
	case time.Time:
		return "a time"
	}
	return fmt.Sprintf("a %T", v)
}

// short is ` ("abc")`: a value as it reads in a message, cut at 24 characters; "" for values
// whose type says all (null) or that are too big to quote (objects, arrays).
func short(v any) string {
	var s string
	switch v := v.(type) {
	case string:
		if utf8.RuneCountInString(v) > 24 {
			v = string([]rune(v)[:24]) + "…"
		}
		s = strconv.Quote(v)
	case bool, int, int64, float64:
		s = fmt.Sprint(v)
	case time.Duration:
		s = v.String()
	default:
		return ""
	}
	return " (" + s + ")"
}

// fieldFunc is the hidden function a field read on the left of `??` becomes.
const fieldFunc = "_flowrun_field"

// field is obj[key] where obj is an object or an array, and nil (for `??` to replace) where
// it is not one, or has no such field or index.
func field(args ...any) (any, error) {
	switch o := args[0].(type) {
	case map[string]any:
		if k, ok := args[1].(string); ok {
			return o[k], nil
		}
	case map[string]string:
		if k, ok := args[1].(string); ok {
			if v, ok := o[k]; ok {
				return v, nil
			}
		}
	case []any:
		var i int
		switch k := args[1].(type) {
		case int:
			i = k
		case float64:
			i = int(k)
		default:
			return nil, nil
		}
		if i < 0 {
			i += len(o)
		}
		if i >= 0 && i < len(o) {
			return o[i], nil
		}
	}
	return nil, nil
}

// guardField rewrites the field read chain m (payload.a.b) into nested field calls.
func guardField(m *ast.MemberNode) ast.Node {
	obj := m.Node
	if inner, ok := obj.(*ast.MemberNode); ok && !inner.Method {
		obj = guardField(inner)
	}
	callee := &ast.IdentifierNode{Value: fieldFunc}
	callee.SetLocation(m.Location())
	c := &ast.CallNode{Callee: callee, Arguments: []ast.Node{obj, m.Property}}
	c.SetLocation(m.Location())
	return c
}

// rootedAtHeaders: the read starts at headers, which `??` already treats (an empty header).
func rootedAtHeaders(m *ast.MemberNode) bool {
	var n ast.Node = m
	for {
		switch x := n.(type) {
		case *ast.MemberNode:
			n = x.Node
		case *ast.IdentifierNode:
			return x.Value == "headers"
		default:
			return false
		}
	}
}

// RuleError is a rule's run-time evaluation error (the delivery is retried, SPEC §7), as the log
// shows it: `FILE:LINE:COL: rule "NAME": what went wrong`.
type RuleError struct {
	Rule string // "" for otherwise
	Part string // "when", "outcome", `emit 1 (stream "out")`, `emit 1 (stream "out"): header "n"`
	Err  error  // an *EvalError, or another error of the part
}

func (e *RuleError) Unwrap() error { return e.Err }

func (e *RuleError) Error() string {
	var b strings.Builder
	var ee *EvalError
	errors.As(e.Err, &ee)
	if ee != nil && ee.At != "" {
		b.WriteString(ee.At)
		b.WriteString(": ")
	}
	if e.Rule != "" {
		fmt.Fprintf(&b, "rule %q: ", e.Rule)
	}
	msg := e.Err.Error()
	if ee != nil { // the position goes first (At) or last, not in the middle
		what := ee.Message
		if ee.Reason != "" {
			what = ee.Reason
		}
		msg = strings.Replace(msg, ee.Error(), what, 1)
	}
	// An explained when or outcome needs no part: the position and the reason say it.
	if ee == nil || ee.Reason == "" || error(ee) != e.Err || e.Rule == "" {
		b.WriteString(e.Part)
		b.WriteString(": ")
	}
	b.WriteString(msg)
	if ee != nil && ee.At == "" {
		fmt.Fprintf(&b, " (at %d:%d)", ee.Line, ee.Column)
	}
	return b.String()
}

// ErrorGroup implements engine.GroupedError: errors of one rule, part and place that fail the
// same way (Kind, or the message when there is no Kind) are one group, logged once per interval
// and counted per delivery under label, the rule's name ("otherwise" for otherwise).
func (e *RuleError) ErrorGroup() (group, label string) {
	reason := e.Err.Error()
	if ee := (*EvalError)(nil); errors.As(e.Err, &ee) {
		reason = fmt.Sprintf("%d:%d %s", ee.Line, ee.Column, ee.Kind)
		if ee.Kind == "" {
			reason += " " + ee.Message
		}
	}
	label = e.Rule
	if label == "" {
		label = "otherwise"
	}
	return e.Rule + "\x00" + e.Part + "\x00" + reason, label
}
