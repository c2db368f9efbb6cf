package plugins

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// guideBlock is the code block of doc.go's guide whose first line is first, without the
// comment markers and the indentation.
func guideBlock(t *testing.T, first string) string {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var blocks [][]string
	var cur []string
	for _, line := range strings.Split(string(src), "\n") {
		if code, ok := strings.CutPrefix(line, "//\t"); ok {
			cur = append(cur, code)
			continue
		}
		if line == "//" && cur != nil {
			cur = append(cur, "") // a blank line inside a block
			continue
		}
		if cur != nil {
			blocks = append(blocks, cur)
			cur = nil
		}
	}
	for _, b := range blocks {
		if b[0] == first {
			return strings.TrimSpace(strings.Join(b, "\n")) + "\n"
		}
	}
	t.Fatalf("doc.go has no code block starting %q", first)
	return ""
}

// shoutHandler is the handler package of the test's module: what an author writes, importing
// plugins and nothing else of flowrun's.
const shoutHandler = `package handler

import (
	"bytes"
	"context"

	"github.com/flowrun/flowrun/plugins"
)

type Config struct {
	To string ` + "`hcl:\"to\"`" + `
}

func init() {
	plugins.Register(plugins.Spec[Config]{
		Name: "shout",
		Doc:  "emits each payload in upper case",
		Provision: func(_ context.Context, c Config, _ plugins.Env) (plugins.Handler, error) {
			return plugins.HandlerFunc(func(_ context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
				emit.Emit(plugins.ToRecord(c.To), bytes.ToUpper(m.Payload()), nil)
				return plugins.Ack(), nil
			}), nil
		},
	})
}
`

const shoutPipeline = `pipeline "shout" {
  source "pipe" {
    key = "in"
  }
  out_retry = "in.retry"
  handler "shout" {
    to = "shouted"
  }
}
`

// The guide's recipe for a custom binary against a local checkout, followed as written: its
// go.mod (with the replace pointing at this checkout instead of ../flowrun), its main, a
// handler package of the module's own, and its build command. The binary lists the handler
// and runs a pipeline with it.
func TestGuideCustomBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and a binary")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	gomod := guideBlock(t, "module example.com/payouts")
	const replace = "replace github.com/flowrun/flowrun => ../flowrun"
	if !strings.Contains(gomod, "require github.com/flowrun/flowrun v0.0.0\n") || !strings.Contains(gomod, replace) {
		t.Fatalf("the guide's go.mod lacks the require or the replace:\n%s", gomod)
	}
	gomod = strings.Replace(gomod, replace, "replace github.com/flowrun/flowrun => "+root, 1)
	main := guideBlock(t, "package main")
	if !strings.Contains(main, `_ "example.com/payouts/handler"`) || !strings.Contains(main, "cli.Main()") {
		t.Fatalf("the guide's main is not the one this test expects:\n%s", main)
	}
	for name, content := range map[string]string{
		"go.mod":             gomod,
		"main.go":            main,
		"handler/handler.go": shoutHandler,
		"shout.hcl":          shoutPipeline,
	} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	build := guideBlock(t, "cd payouts")
	cmdline := strings.Split(build, "\n")[1] // go build -mod=mod -o payouts .
	args := strings.Fields(cmdline)
	if args[0] != "go" {
		t.Fatalf("build command %q", cmdline)
	}
	cmd := exec.Command("go", args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmdline, err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "go.sum")); len(b) == 0 {
		t.Error("go.sum was not written")
	}

	bin := filepath.Join(dir, "payouts")
	out, err := exec.Command(bin, "plugins").Output()
	if err != nil || !strings.Contains(string(out), "shout      emits each payload in upper case") || !strings.Contains(string(out), "http ") {
		t.Fatalf("plugins: %v\n%s", err, out)
	}
	run := exec.Command(bin, "run", filepath.Join(dir, "shout.hcl"))
	run.Stdin = strings.NewReader(`{"key":"in","payload":"hello"}` + "\n")
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err = run.Output()
	if err != nil || !strings.Contains(string(out), `"key":"shouted"`) || !strings.Contains(string(out), "HELLO") {
		t.Fatalf("run: %v\nstdout %s\nstderr %s", err, out, stderr.String())
	}
}
