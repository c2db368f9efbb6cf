package rules

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/flowrun/flowrun/engine"
)

// MaxNodes bounds the size of one expression's syntax tree.
const MaxNodes = 2000

var outcomeType = reflect.TypeOf(engine.Outcome{})

// Error is a compile error with a 1-based position inside the expression text.
type Error struct {
	Line, Column int    // 1-based, in the expression source text given to Compile*; columns count characters (runes)
	Message      string // short, lowercase, no position inside (e.g. `unknown name "paylod"`)
}

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Message) }

// program is one compiled expression and what it reads from a delivery.
type program struct {
	src         string
	prog        *vm.Program
	usesPayload bool // reads payload: decode the JSON before running
	usesRaw     bool // reads raw: convert the payload to a string before running
	runReads    RunReads
	// konst is the outcome of an expression that is one constant (ack, retry_after('5s')): it
	// is returned without running the VM or building an environment.
	konst *engine.Outcome
	// direct, for an emit value that is a constant ('flowrun', 1 + 2 once folded), reads one
	// header (headers['x'], headers.x) or stamps the time (now(), now().UnixMilli()), gives its
	// value without running the VM: most emit headers are one of these, and a VM run costs
	// more than the rest of such a header.
	direct func(d *engine.Delivery) any
	// ops are the operations that can fail on their operands' types, by the VM's error
	// location (runerr.go); locate maps a position in src to the file (SetLocator).
	ops    map[int]*opInfo
	locate Locator
}

// Condition is a compiled `when` expression.
type Condition struct{ program }

// OutcomeExpr is a compiled `outcome` or `otherwise` expression.
type OutcomeExpr struct{ program }

// Value is a compiled emit payload or header expression.
type Value struct{ program }

// String returns the expression's source text.
func (p *program) String() string { return p.src }

type exprKind uint8

const (
	kindValue exprKind = iota
	kindCondition
	kindOutcome
	kindFilter
)

// CompileCondition compiles a `when` expression, which must be boolean.
func CompileCondition(src string) (*Condition, error) {
	p, err := compile(src, kindCondition)
	if err != nil {
		return nil, err
	}
	return &Condition{p}, nil
}

// CompileOutcome compiles an `outcome` or `otherwise` expression, which must evaluate to an
// outcome: ack, drop, retry, retry_after(d), or an expression of that type such as
// `attempt < 3 ? retry : drop`.
func CompileOutcome(src string) (*OutcomeExpr, error) {
	p, err := compile(src, kindOutcome)
	if err != nil {
		return nil, err
	}
	return &OutcomeExpr{p}, nil
}

// CompileValue compiles an emit payload or header expression of any type.
func CompileValue(src string) (*Value, error) {
	p, err := compile(src, kindValue)
	if err != nil {
		return nil, err
	}
	return &Value{p}, nil
}

// Eval evaluates the value over d, in the rules' environment: a workflow's run_id over the
// start delivery, a step's payload over the step's (SPEC §16). Its errors are *EvalError
// (positioned; in the file with a Locator) or say what else failed.
func (v *Value) Eval(d *engine.Delivery) (any, error) {
	s := state{d: d}
	return v.run(&s)
}

// EvalPayload is Eval written as an emit's payload is: a string as its bytes, any other value
// as its JSON text. A step's payload (workflow.PayloadFunc).
func (v *Value) EvalPayload(d *engine.Delivery) ([]byte, error) {
	out, err := v.Eval(d)
	if err != nil {
		return nil, err
	}
	return encodePayload(out)
}

// EvalString is Eval written as a header value is (numbers in decimal, other non-strings as
// JSON); a nil result is an error, so a missing field never names one thing for every message
// that lacks it. A workflow's run_id.
func (v *Value) EvalString(d *engine.Delivery) (string, error) {
	out, err := v.Eval(d)
	if err != nil {
		return "", err
	}
	if out == nil {
		return "", fmt.Errorf("%s gave nil", v.src)
	}
	return headerString(out)
}

func compile(src string, kind exprKind) (program, error) {
	if strings.TrimSpace(src) == "" {
		return program{}, &Error{Line: 1, Column: 1, Message: "empty expression"}
	}
	pt := &patcher{src: []rune(src)}
	var envType any = env{}
	if kind == kindFilter {
		envType = filterEnv{}
	}
	opts := []expr.Option{
		expr.Env(envType),
		expr.MaxNodes(MaxNodes),
		expr.Patch(pt),
	}
	for _, f := range functions {
		opts = append(opts, expr.Function(f.Name, f.fn, f.types...))
	}
	opts = append(opts, timeMethodOpts...)
	opts = append(opts, expr.Function(fieldFunc, field))
	if kind == kindCondition || kind == kindFilter {
		opts = append(opts, expr.AsBool())
	}
	prog, err := expr.Compile(src, opts...)
	// The patcher's own errors are more specific than what the checker makes of a node the
	// patcher had to leave alone (a backoff with one argument, say).
	if pt.err != nil {
		return program{}, errorAt(src, pt.errLoc.From, pt.err.Error())
	}
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			return program{}, errorAt(src, fe.From, cleanMessage(fe.Message))
		}
		return program{}, &Error{Line: 1, Column: 1, Message: cleanMessage(err.Error())}
	}
	if kind == kindOutcome {
		if t := prog.Node().Type(); t != outcomeType {
			bad := offending(prog.Node())
			from := startOf(bad)
			if bad == prog.Node() {
				// The optimizer may have folded the root (1 + 2 is a 3 located at the +).
				from = len([]rune(src)) - len([]rune(strings.TrimLeft(src, " \t\r\n")))
			}
			return program{}, errorAt(src, from,
				fmt.Sprintf("expected an outcome (ack, drop, retry or retry_after(d)), got %s", typeName(bad.Type())))
		}
	}
	p := program{src: src, prog: prog, usesPayload: pt.usesPayload, usesRaw: pt.usesRaw, runReads: pt.runReads, ops: pt.ops}
	switch kind {
	case kindOutcome:
		p.konst = constantOutcome(prog.Node())
	case kindValue:
		p.direct = directValue(prog.Node())
	}
	return p, nil
}

// directValue returns how to read a value expression's result without the VM, where the
// expression (after expr's constant folding) is a literal, one header read, now() or a time
// method of now() (now().UnixMilli()); nil otherwise. What it gives is what the VM gives: a
// literal's Go value, a header's string ("" when missing), the time or the method's result.
func directValue(n ast.Node) func(d *engine.Delivery) any {
	var v any
	switch n := n.(type) {
	case *ast.StringNode:
		v = n.Value
	case *ast.IntegerNode:
		v = n.Value
	case *ast.FloatNode:
		v = n.Value
	case *ast.BoolNode:
		v = n.Value
	case *ast.ConstantNode:
		v = n.Value
	case *ast.MemberNode:
		id, ok := n.Node.(*ast.IdentifierNode)
		name, isStr := n.Property.(*ast.StringNode)
		if !ok || id.Value != "headers" || !isStr || n.Optional || n.Method {
			return nil
		}
		key := name.Value
		return func(d *engine.Delivery) any { return d.Headers[key] }
	case *ast.BuiltinNode:
		if n.Name != "now" || len(n.Arguments) != 0 {
			return nil
		}
		return func(*engine.Delivery) any { return time.Now() }
	case *ast.CallNode:
		// now().UnixMicro() and the like, once patched (timemethods.go): a processing time stamp.
		callee, ok := n.Callee.(*ast.IdentifierNode)
		if !ok || len(n.Arguments) != 1 || !strings.HasPrefix(callee.Value, timeFuncPrefix) {
			return nil
		}
		m, ok := timeMethods[strings.TrimPrefix(callee.Value, timeFuncPrefix)]
		if now, isNow := n.Arguments[0].(*ast.BuiltinNode); !ok || !isNow || now.Name != "now" || len(now.Arguments) != 0 {
			return nil
		}
		return func(*engine.Delivery) any { return m.fn(time.Now()) }
	default:
		return nil
	}
	return func(*engine.Delivery) any { return v }
}

// constantOutcome returns the outcome n always evaluates to, or nil when it depends on the
// delivery.
func constantOutcome(n ast.Node) *engine.Outcome {
	var o engine.Outcome
	switch n := n.(type) {
	case *ast.ConstantNode:
		c, ok := n.Value.(engine.Outcome)
		if !ok {
			return nil
		}
		o = c
	case *ast.IdentifierNode:
		switch n.Value {
		case "ack":
			o = engine.Ack()
		case "drop":
			o = engine.Drop()
		case "retry":
			o = engine.Retry()
		default:
			return nil
		}
	default:
		return nil
	}
	return &o
}

// offending finds the branch of a conditional that is not an outcome, so the error points there.
func offending(n ast.Node) ast.Node {
	if c, ok := n.(*ast.ConditionalNode); ok {
		for _, b := range []ast.Node{c.Exp1, c.Exp2} {
			if b.Type() != outcomeType {
				return offending(b)
			}
		}
	}
	return n
}

// startOf returns the rune offset where node n's text starts: the smallest location in its
// subtree (a binary node is located at its operator).
func startOf(n ast.Node) int {
	v := &minLoc{min: n.Location().From}
	ast.Walk(&n, v)
	return v.min
}

type minLoc struct{ min int }

func (m *minLoc) Visit(node *ast.Node) {
	if from := (*node).Location().From; from < m.min {
		m.min = from
	}
}

func typeName(t reflect.Type) string {
	if t == nil || t.Kind() == reflect.Interface {
		return "a value of unknown type"
	}
	switch t {
	case reflect.TypeOf(time.Duration(0)):
		return "duration"
	case reflect.TypeOf([]any{}):
		return "array"
	case reflect.TypeOf(map[string]any{}):
		return "map"
	}
	return t.String()
}

// errorAt converts a rune offset inside src into a 1-based line and column.
func errorAt(src string, from int, msg string) *Error {
	line, col := 1, 1
	n := 0
	for _, r := range src {
		if n == from {
			break
		}
		if r == '\n' {
			line++
			col = 1
		} else {
			col++
		}
		n++
	}
	return &Error{Line: line, Column: col, Message: msg}
}

// cleanMessage makes expr's messages fit ours: one line, names quoted.
func cleanMessage(msg string) string {
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimSpace(msg)
	if name, ok := strings.CutPrefix(msg, "unknown name "); ok && !strings.ContainsAny(name, ` "`) {
		return fmt.Sprintf("unknown name %q", name)
	}
	msg = strings.ReplaceAll(msg, "type rules.runInfo", "run") // run.nope: "run has no field nope"
	return strings.ReplaceAll(msg, "engine.Outcome", "outcome")
}

// patcher rewrites the tree between parsing and type checking: ack()/drop()/retry() become the
// plain values, retry_after with a constant string becomes a constant outcome (validated here, so
// a bad duration is a compile error with its position), backoff gets the attempt as a hidden third
// argument and its constant strings become durations. It also records what the expression reads.
// It runs once per compile, on the tree as the user wrote it.
type patcher struct {
	src                  []rune
	ops                  map[int]*opInfo
	usesPayload, usesRaw bool
	runReads             RunReads
	err                  error
	errLoc               file.Location
}

func (p *patcher) fail(n ast.Node, format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf(format, args...)
		p.errLoc = n.Location()
	}
}

func (p *patcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.IdentifierNode:
		switch n.Value {
		case "payload":
			p.usesPayload = true
		case "raw":
			p.usesRaw = true
		case "input":
			p.runReads.Input = true
		case "steps":
			p.runReads.Steps = true
		case "$env":
			p.usesPayload, p.usesRaw = true, true
			p.runReads = RunReads{Input: true, Steps: true}
		}
	case *ast.MemberNode:
		p.record(n)
	case *ast.BinaryNode:
		p.record(n)
		// A field read on the left of `??` gives nil, not an error, where its object is not
		// an object (a plain-text payload, a number): `payload.amount ?? 0` is 0 then.
		if m, ok := n.Left.(*ast.MemberNode); ok && n.Operator == "??" && !m.Method && !rootedAtHeaders(m) {
			n.Left = guardField(m)
		}
		// headers is a map of strings, so a missing header reads as "" and `??` would never
		// apply; users write `headers['x'] ?? 'default'` expecting it to, so an empty header
		// counts as missing on the left of `??`.
		if m, ok := n.Left.(*ast.MemberNode); ok && n.Operator == "??" {
			if id, ok := m.Node.(*ast.IdentifierNode); ok && id.Value == "headers" {
				loc := m.Location()
				empty := &ast.StringNode{Value: ""}
				empty.SetLocation(loc)
				cond := &ast.BinaryNode{Operator: "==", Left: m, Right: empty}
				cond.SetLocation(loc)
				null := &ast.NilNode{}
				null.SetLocation(loc)
				c := &ast.ConditionalNode{Cond: cond, Exp1: null, Exp2: m}
				c.SetLocation(loc)
				n.Left = c
			}
		}
	case *ast.CallNode:
		if patchTimeMethod(node, n) {
			return
		}
		callee, ok := n.Callee.(*ast.IdentifierNode)
		if !ok {
			return
		}
		switch callee.Value {
		case "ack", "drop", "retry":
			if len(n.Arguments) != 0 {
				p.fail(n.Arguments[0], "%s takes no arguments", callee.Value)
				return
			}
			ast.Patch(node, &ast.IdentifierNode{Value: callee.Value})
		case "retry_after":
			if len(n.Arguments) != 1 {
				p.fail(n, "retry_after takes one argument (a duration), got %d", len(n.Arguments))
				return
			}
			if s, ok := n.Arguments[0].(*ast.StringNode); ok {
				d, err := parseDuration(s.Value)
				if err != nil {
					p.fail(s, "retry_after: %v", err)
					return
				}
				ast.Patch(node, &ast.ConstantNode{Value: engine.RetryAfter(d)})
			}
		case "backoff":
			if len(n.Arguments) != 2 {
				p.fail(n, "backoff takes two arguments (base, max), got %d", len(n.Arguments))
				return
			}
			for i, a := range n.Arguments {
				s, ok := a.(*ast.StringNode)
				if !ok {
					continue
				}
				d, err := parseDuration(s.Value)
				if err != nil {
					p.fail(s, "backoff: %v", err)
					return
				}
				ast.Patch(&n.Arguments[i], &ast.ConstantNode{Value: d})
			}
			// $env.attempt rather than attempt: a `let attempt` cannot shadow it.
			loc := n.Location()
			envNode := &ast.IdentifierNode{Value: "$env"}
			envNode.SetLocation(loc)
			prop := &ast.StringNode{Value: "attempt"}
			prop.SetLocation(loc)
			attempt := &ast.MemberNode{Node: envNode, Property: prop}
			attempt.SetLocation(loc)
			n.Arguments = append(n.Arguments, attempt)
		}
	}
}
