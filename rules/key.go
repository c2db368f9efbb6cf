package rules

import (
	"errors"

	"github.com/expr-lang/expr/ast"

	"github.com/flowrun/flowrun/engine"
)

// Key is a compiled flow-control key expression (SPEC §13): its result as a string (as a header
// value is written: numbers in decimal, other non-strings as JSON) is the key value.
type Key struct {
	program
	// path, for a key that is a field of the payload (payload.customer, payload.a.b), is its
	// names: FlowKey reads them from the decoded payload without the VM, which costs more than
	// the read and runs for every delivery of a pipeline under flow control.
	path []string
}

var _ engine.KeyFunc = (*Key)(nil)

// errNilKey is a key expression that gave nothing: a missing field must not silently share
// one key with every other message that lacks it.
var errNilKey = errors.New("key expression gave nil")

// CompileKey compiles a concurrency_key, throttle or dedupe key expression, with the rules'
// environment.
func CompileKey(src string) (*Key, error) {
	p, err := compile(src, kindValue)
	if err != nil {
		return nil, err
	}
	return &Key{program: p, path: payloadPath(p.prog.Node())}, nil
}

// payloadPath returns the field names of an expression that reads payload.a.b (or
// payload['a']), nil for any other.
func payloadPath(n ast.Node) []string {
	var path []string
	for {
		switch m := n.(type) {
		case *ast.MemberNode:
			name, ok := m.Property.(*ast.StringNode)
			if !ok || m.Method {
				return nil
			}
			path = append([]string{name.Value}, path...)
			n = m.Node
		case *ast.IdentifierNode:
			if m.Value != "payload" || len(path) == 0 {
				return nil
			}
			return path
		default:
			return nil
		}
	}
}

// fetch reads k.path from d's payload when every step is a JSON object, as the VM would; ok is
// false otherwise (not JSON, a missing or non-object step), and the VM decides, errors and all.
func (k *Key) fetch(d *engine.Delivery) (v any, ok bool) {
	v = decoded(d)
	for _, name := range k.path {
		m, isMap := v.(map[string]any)
		if !isMap {
			return nil, false
		}
		v = m[name] // a missing field is nil, as the VM reads it
	}
	return v, true
}

// FlowKey implements engine.KeyFunc. An evaluation error, or a nil result, is an error: the
// delivery counts as retry.
func (k *Key) FlowKey(d *engine.Delivery) (string, error) {
	if k.path != nil {
		if v, ok := k.fetch(d); ok {
			if v == nil {
				return "", errNilKey
			}
			return headerString(v)
		}
	}
	s := state{d: d}
	v, err := k.run(&s)
	if err != nil {
		return "", err
	}
	if v == nil {
		return "", errNilKey
	}
	return headerString(v)
}
