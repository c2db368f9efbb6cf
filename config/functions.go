package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// evalContext is the one curated set of functions available in every attribute (SPEC §2).
// There are no variables. file() reads relative to dir, the directory of the calling file.
// rec, when set, records the values env() and file() return (for fingerprints).
func evalContext(dir string, rec *inputRecorder) *hcl.EvalContext {
	return &hcl.EvalContext{
		Functions: map[string]function.Function{
			"env":        recorded(envFunc, "env", rec),
			"file":       recorded(fileFunc(dir), "file", rec),
			"jsonencode": stdlib.JSONEncodeFunc,
		},
	}
}

// recorded wraps a one-string-result function so that rec sees what each call returned.
func recorded(f function.Function, name string, rec *inputRecorder) function.Function {
	if rec == nil {
		return f
	}
	return function.New(&function.Spec{
		Description: f.Description(),
		Params:      f.Params(),
		VarParam:    f.VarParam(),
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			v, err := f.Call(args)
			if err == nil && v.IsKnown() && !v.IsNull() && len(args) > 0 && args[0].IsKnown() && !args[0].IsNull() {
				rec.add(name, args[0].AsString(), v.AsString())
			}
			return v, err
		},
	})
}

// FunctionDoc is one function of the configuration language, for the reference in docs/.
type FunctionDoc struct {
	Name      string
	Signature string // "env(name, [default])"
	Doc       string
}

// Functions lists the functions available in every attribute, in name order, read from the
// evaluation context that decodes the files.
func Functions() []FunctionDoc {
	fns := evalContext(".", nil).Functions
	names := make([]string, 0, len(fns))
	for n := range fns {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]FunctionDoc, 0, len(names))
	for _, n := range names {
		f := fns[n]
		var params []string
		for _, p := range f.Params() {
			params = append(params, p.Name)
		}
		if vp := f.VarParam(); vp != nil {
			params = append(params, "["+vp.Name+"]")
		}
		out = append(out, FunctionDoc{Name: n, Signature: n + "(" + strings.Join(params, ", ") + ")", Doc: f.Description()})
	}
	return out
}

// envFunc is env(NAME) or env(NAME, DEFAULT). An unset variable without a default is an error
// reported at the NAME argument; a set but empty variable is returned as is.
var envFunc = function.New(&function.Spec{
	Description: "The value of the environment variable `name`, or `default` when it is unset; an unset variable without a default is a config error. A set but empty variable is returned as is.",
	Params:      []function.Parameter{{Name: "name", Type: cty.String}},
	VarParam:    &function.Parameter{Name: "default", Type: cty.String},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		if len(args) > 2 {
			return cty.NilVal, function.NewArgErrorf(2, "env takes a name and at most one default")
		}
		for i, a := range args {
			if a.IsNull() {
				return cty.NilVal, function.NewArgErrorf(i, "must not be null")
			}
		}
		name := args[0].AsString()
		if name == "" {
			return cty.NilVal, function.NewArgErrorf(0, "the variable name is empty")
		}
		if v, ok := os.LookupEnv(name); ok {
			return cty.StringVal(v), nil
		}
		if len(args) == 2 {
			return args[1], nil
		}
		return cty.NilVal, function.NewArgErrorf(0, "environment variable %q is not set and no default is given", name)
	},
})

// fileFunc is file(PATH): the contents of a UTF-8 text file, PATH relative to dir.
func fileFunc(dir string) function.Function {
	return function.New(&function.Spec{
		Description: "The contents of a UTF-8 text file (at most 4 MiB), `path` relative to the configuration file that calls it.",
		Params:      []function.Parameter{{Name: "path", Type: cty.String}},
		Type:        function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if args[0].IsNull() {
				return cty.NilVal, function.NewArgErrorf(0, "must not be null")
			}
			rel := args[0].AsString()
			b, err := readRegularFile(resolvePath(dir, rel))
			if err != nil {
				// Only the reason: the absolute path would add noise to the message.
				reason := err.Error()
				var pe *fs.PathError
				if errors.As(err, &pe) {
					reason = pe.Err.Error()
				}
				return cty.NilVal, function.NewArgErrorf(0, "cannot read %q: %s", rel, reason)
			}
			if !utf8.Valid(b) {
				return cty.NilVal, function.NewArgErrorf(0, "%q is not valid UTF-8 text", rel)
			}
			return cty.StringVal(string(b)), nil
		},
	})
}

// maxFileFuncSize bounds what file() reads: a config value, not a data set.
const maxFileFuncSize = 4 << 20

// readRegularFile reads a regular file of at most maxFileFuncSize bytes. A device, a FIFO or a
// folder is refused, so file("/dev/zero") or file("/dev/stdin") cannot exhaust memory or hang.
func readRegularFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > maxFileFuncSize {
		return nil, fmt.Errorf("larger than %d MiB", maxFileFuncSize>>20)
	}
	return io.ReadAll(io.LimitReader(f, maxFileFuncSize+1))
}
