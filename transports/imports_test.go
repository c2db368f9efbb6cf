package transports

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// shared are the packages under transports/ that are not transports: helpers every transport
// may import (the Redis client layer, the flow store every Redis source kind provides through
// redisflow.Reader, the stream dead-letter tools, the conformance suite, and under internal/
// what only transports may import, such as the durable delay queues' delayq), and builtin, which
// imports every transport by design.
var shared = map[string]bool{"redisconn": true, "redisflow": true, "streamdlq": true, "transporttest": true, "internal": true, "builtin": true}

// TestTransportsImportNoTransport: no transport package imports another (docs/architecture.md:
// a new transport touches one package), and no shared helper imports a transport, which would
// be the same coupling one step removed. Every other directory under transports/ counts as a
// transport, so a new one is checked without editing this test. Test files are not checked.
func TestTransportsImportNoTransport(t *testing.T) {
	const prefix = "github.com/flowrun/flowrun/transports/"
	dirs, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	transport := map[string]bool{}
	for _, d := range dirs {
		if d.IsDir() && !shared[d.Name()] && d.Name() != "testdata" {
			transport[d.Name()] = true
		}
	}
	for _, want := range []string{"file", "pipe", "redisstream", "redislist", "redispubsub"} {
		if !transport[want] {
			t.Errorf("no transport package %q: the test reads the wrong directory", want)
		}
	}
	fset := token.NewFileSet()
	for _, d := range dirs {
		if !d.IsDir() || d.Name() == "builtin" || d.Name() == "testdata" {
			continue
		}
		files, err := filepath.Glob(filepath.Join(d.Name(), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if d.Name() == "internal" { // its packages are one level down
			more, err := filepath.Glob(filepath.Join(d.Name(), "*", "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, more...)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				other, ok := strings.CutPrefix(path, prefix)
				if !ok || !transport[strings.Split(other, "/")[0]] {
					continue
				}
				what := "transport package " + d.Name()
				if shared[d.Name()] {
					what = "shared package " + d.Name()
				}
				t.Errorf("%s: %s imports transport package %s; move what both need into a shared package (redisconn, redisflow, streamdlq)",
					fset.Position(imp.Pos()), what, other)
			}
		}
	}
}
