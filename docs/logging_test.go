package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// durationWord names a log field that holds a time span, whatever zerolog method writes it.
var durationWord = regexp.MustCompile(`(^|_)(elapsed|down_for|idle|delay|duration|timeout|took|wait|lease|latency|age|backoff|interval|period|after)(_|$)`)

// Every duration a log line carries is a number of milliseconds in a field whose name ends in
// _ms (docs/logging.md): every zerolog Dur field in the code, and every number field named for
// a time span, is so named, and nothing changes zerolog's duration unit from milliseconds.
func TestLogDurationsAreMilliseconds(t *testing.T) {
	page, err := os.ReadFile("logging.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "`_ms`") {
		t.Errorf("docs/logging.md does not state the _ms convention for durations")
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "zerolog" && (n.Sel.Name == "DurationFieldUnit" || n.Sel.Name == "DurationFieldInteger") {
					t.Errorf("%s: sets zerolog.%s; log durations are float milliseconds named *_ms", fset.Position(n.Pos()), n.Sel.Name)
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || len(n.Args) < 2 {
					return true
				}
				lit, ok := n.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				key, _ := strconv.Unquote(lit.Value)
				switch sel.Sel.Name {
				case "Dur", "Durs":
					checked++
					if !strings.HasSuffix(key, "_ms") {
						t.Errorf("%s: log field %q is a duration: name it %q", fset.Position(n.Pos()), key, key+"_ms")
					}
				case "Float64", "Float32", "Int", "Int64", "Int32", "Uint64":
					if durationWord.MatchString(key) && !strings.HasSuffix(key, "_ms") && !strings.HasSuffix(key, "_key") {
						t.Errorf("%s: log field %q holds a time span: give it in milliseconds as %q", fset.Position(n.Pos()), key, key+"_ms")
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 3 {
		t.Errorf("found only %d zerolog Dur fields; the walk missed the code", checked)
	}
}
