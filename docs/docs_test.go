package docs

import (
	"bytes"
	"context"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclwrite"

	"github.com/flowrun/flowrun/cli"
	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/rules"
	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
)

// The committed pages are what the code declares now: a change to a schema, a doc string, a
// metric or a flag without `go generate ./docs` fails here, naming the page.
func TestDocsAreCurrent(t *testing.T) {
	pages, _ := Generate()
	for _, p := range pages {
		got, err := os.ReadFile(filepath.FromSlash(p.Path))
		if err != nil {
			t.Errorf("docs/%s is missing: run `%s`", p.Path, Command)
			continue
		}
		if string(got) != p.Content {
			t.Errorf("docs/%s is stale (line %d differs): run `%s`", p.Path, firstDiff(string(got), p.Content), Command)
		}
	}
	stale, err := Stale(".", pages)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stale {
		t.Errorf("docs/%s was generated but is no longer: run `%s`", s, Command)
	}
}

func firstDiff(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

// Every example on every page loads as `flowrun validate` loads it, without an error or a
// warning, and the examples with test blocks pass `flowrun test`.
func TestExamplesValidate(t *testing.T) {
	_, examples := Generate()
	if len(examples) < len(transports.Kinds())+6 {
		t.Fatalf("only %d examples", len(examples))
	}
	for _, ex := range examples {
		t.Run(ex.Page+"/"+ex.Name, func(t *testing.T) {
			if f := string(hclwrite.Format([]byte(ex.HCL))); f != ex.HCL {
				t.Errorf("docs/%s: example %q is not in `flowrun fmt` layout; it should read:\n%s", ex.Page, ex.Name, f)
			}
			dir := t.TempDir()
			file := filepath.Join(dir, "example.hcl")
			if err := os.WriteFile(file, []byte(ex.HCL), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, diags := config.Load([]string{file}, config.Options{Hostname: "worker-1"})
			if len(diags) > 0 {
				var b bytes.Buffer
				config.WriteDiagnostics(&b, cfg.Files(), diags)
				t.Fatalf("docs/%s: example %q does not validate:\n%s", ex.Page, ex.Name, b.String())
			}
			if len(cfg.Tests) > 0 {
				var out, errOut bytes.Buffer
				code := cli.Run(context.Background(), []string{"test", file}, cli.Stdio{In: strings.NewReader(""), Out: &out, Err: &errOut})
				if code != 0 {
					t.Fatalf("docs/%s: example %q: flowrun test exits %d:\n%s%s", ex.Page, ex.Name, code, out.String(), errOut.String())
				}
			}
		})
	}
}

func TestFilterExampleCompiles(t *testing.T) {
	if _, err := rules.CompileFilter(dlqWhereExample); err != nil {
		t.Errorf("the dlq --where example of docs/%s: %v", expressionsPath, err)
	}
}

// Every source kind has its page with an example, and every attribute, block, handler, function,
// header and metric that the code declares appears in the reference.
func TestEverythingIsDocumented(t *testing.T) {
	pages, _ := Generate()
	byPath := map[string]string{}
	for _, p := range pages {
		byPath[p.Path] = p.Content
	}
	for _, k := range transports.Kinds() {
		page := byPath[sourcePath(k.Name)]
		if k.Example == "" || k.Summary == "" || k.Doc == "" {
			t.Errorf("source kind %q lacks a Summary, Doc or Example in its transports.Register", k.Name)
		}
		for _, a := range sourceAttrs(k) {
			if a.Doc == "" || a.Type == "" {
				t.Errorf("source kind %q: attribute %q has no Type or Doc", k.Name, a.Name)
			}
			if !strings.Contains(page, "`"+a.Name+"`") {
				t.Errorf("docs/%s does not show %q", sourcePath(k.Name), a.Name)
			}
		}
		for _, pa := range k.PipelineAttrs {
			if pa.Doc == "" || pa.Type == "" {
				t.Errorf("source kind %q: pipeline attribute %q has no Type or Doc", k.Name, pa.Name)
			}
		}
	}
	for _, e := range transports.EmitKinds() {
		if e.Doc == "" {
			t.Errorf("emit kind %q has no Doc", e.Name)
		}
	}
	var walk func(path string, b *schema.Body)
	walk = func(path string, b *schema.Body) {
		for _, a := range b.Attrs {
			if a.Doc == "" || a.Type == "" {
				t.Errorf("%s: attribute %q has no Type or Doc", path, a.Name)
			}
		}
		for _, nb := range b.Blocks {
			if nb.Doc == "" {
				t.Errorf("%s: block %q has no Doc", path, nb.Type)
			}
			if nb.Body != nil {
				walk(path+" "+nb.Type, nb.Body)
			}
		}
	}
	walk("config", config.Reference())
	for _, name := range handlers.Names() {
		if h, _ := handlers.Lookup(name); h.Body == nil {
			t.Errorf("handler %q has no Body documenting its block", name)
		}
	}
	cfg := byPath[configPath]
	for _, name := range handlers.Names() {
		if !strings.Contains(cfg, `handler "`+name+`"`) {
			t.Errorf("docs/%s lacks handler %q", configPath, name)
		}
	}
	// The README links the reference, and never SPEC.md, which is not in the repository.
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`SPEC(\.md)?\b`).Match(readme) {
		t.Errorf("README.md mentions SPEC, which is not in the repository: link docs/ instead")
	}
	for _, p := range pages {
		if p.Path != "README.md" && !strings.Contains(string(readme), "docs/"+p.Path) {
			t.Errorf("README.md does not link docs/%s", p.Path)
		}
	}
}

// Every relative link of every page reaches a file, and an anchor on a generated page exists.
func TestLinksResolve(t *testing.T) {
	pages, _ := Generate()
	byPath := map[string]string{}
	for _, p := range pages {
		byPath[p.Path] = p.Content
	}
	link := regexp.MustCompile(`\]\(([^)\s]*)\)`)
	for _, p := range pages {
		for _, m := range link.FindAllStringSubmatch(p.Content, -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			rel := p.Path
			if file != "" {
				rel = path.Clean(path.Join(path.Dir(p.Path), file))
			}
			if _, err := os.Stat(filepath.FromSlash(rel)); err != nil {
				t.Errorf("docs/%s links %q, which does not exist", p.Path, target)
				continue
			}
			if content, generated := byPath[rel]; generated && anchor != "" && !strings.Contains(content, `id="`+anchor+`"`) {
				t.Errorf("docs/%s links %q: docs/%s has no anchor %q", p.Path, target, rel, anchor)
			}
		}
	}
}
