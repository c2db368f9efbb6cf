package rules

import (
	"errors"

	"github.com/flowrun/flowrun/engine"
)

// Key is a compiled flow-control key expression (SPEC §13): its result as a string (as a header
// value is written: numbers in decimal, other non-strings as JSON) is the key value.
type Key struct{ program }

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
	return &Key{p}, nil
}

// FlowKey implements engine.KeyFunc. An evaluation error, or a nil result, is an error: the
// delivery counts as retry.
func (k *Key) FlowKey(d *engine.Delivery) (string, error) {
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
