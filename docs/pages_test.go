package docs

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclwrite"

	"github.com/flowrun/flowrun/cli"
	"github.com/flowrun/flowrun/config"
)

// The tests of this file read the Markdown pages as a reader finds them: the README and every
// page under docs/, hand-written or generated. Paths are relative to the repository's root.

// maxReadmeLines keeps the README something a newcomer reads in one sitting; the rest lives in docs/.
const maxReadmeLines = 400

// markdownPages returns README.md and every .md file under docs/, with slashes, from the root.
func markdownPages(t *testing.T) map[string]string {
	t.Helper()
	pages := map[string]string{}
	read := func(p string) {
		b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		pages[p] = string(b)
	}
	read("README.md")
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		read("docs/" + filepath.ToSlash(p))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

func TestREADMEIsShort(t *testing.T) {
	readme := markdownPages(t)["README.md"]
	if n := strings.Count(readme, "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, over %d: move the detail into a page under docs/ and link it", n, maxReadmeLines)
	}
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]*)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	htmlID    = regexp.MustCompile(`id="([^"]+)"`)
	fence     = regexp.MustCompile("(?ms)^```[^\n]*\n.*?^```")
)

// withoutCode is the page with its fenced code blocks blanked, so that a `# comment` in a
// block is not taken for a heading nor `x](y)` in code for a link.
func withoutCode(page string) string {
	return fence.ReplaceAllString(page, "")
}

// slug is the anchor GitHub gives a heading: lower case, punctuation dropped (but `-` and `_`),
// spaces as dashes.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && r != '›' && r != '—' && r != '–':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the fragments a page answers: its headings' slugs (with GitHub's -1, -2 for
// repeats) and its explicit id="…" anchors.
func anchors(page string) map[string]bool {
	a := map[string]bool{}
	text := withoutCode(page)
	seen := map[string]int{}
	for _, m := range mdHeading.FindAllStringSubmatch(text, -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			a[s+"-"+strconv.Itoa(n)] = true
		} else {
			a[s] = true
		}
		seen[s]++
	}
	for _, m := range htmlID.FindAllStringSubmatch(page, -1) {
		a[m[1]] = true
	}
	return a
}

// links returns a page's relative links, resolved against the page's folder: target file (from
// the root) and fragment.
func links(p, page string) [][2]string {
	var out [][2]string
	for _, m := range mdLink.FindAllStringSubmatch(withoutCode(page), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, frag, _ := strings.Cut(target, "#")
		rel := p
		if file != "" {
			rel = path.Clean(path.Join(path.Dir(p), file))
		}
		out = append(out, [2]string{rel, frag})
	}
	return out
}

// Every relative link of the README and of every page under docs/ reaches a file in the
// repository, and a link into a Markdown page with a #fragment names a heading or an anchor there.
func TestPageLinksResolve(t *testing.T) {
	pages := markdownPages(t)
	for p, page := range pages {
		for _, l := range links(p, page) {
			rel, frag := l[0], l[1]
			if strings.HasPrefix(rel, "../") {
				t.Errorf("%s links %q, outside the repository", p, rel)
				continue
			}
			if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(rel))); err != nil {
				t.Errorf("%s links %s, which does not exist", p, rel)
				continue
			}
			if frag == "" || !strings.HasSuffix(rel, ".md") {
				continue
			}
			if target, ok := pages[rel]; ok && !anchors(target)[frag] {
				t.Errorf("%s links %s#%s: %s has no heading or anchor %q", p, rel, frag, rel, frag)
			}
		}
	}
}

// Every page under docs/ is reachable from docs/README.md by following links, so none is
// written and then never found.
func TestEveryPageIsReachable(t *testing.T) {
	pages := markdownPages(t)
	seen := map[string]bool{"docs/README.md": true}
	queue := []string{"docs/README.md"}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, l := range links(p, pages[p]) {
			if _, ok := pages[l[0]]; ok && !seen[l[0]] && l[0] != "README.md" {
				seen[l[0]] = true
				queue = append(queue, l[0])
			}
		}
	}
	for p := range pages {
		if p != "README.md" && !seen[p] {
			t.Errorf("%s is not reachable from docs/README.md: link it from the index (guides in docs/docs.go) or a page it lists", p)
		}
	}
}

// examplePath is a file under examples/ named in a page, in prose or in a command.
var examplePath = regexp.MustCompile(`\bexamples/[A-Za-z0-9_./-]*[A-Za-z0-9_/]`)

// Every file or folder under examples/ that a page names exists.
func TestNamedExamplesExist(t *testing.T) {
	for p, page := range markdownPages(t) {
		for _, m := range examplePath.FindAllString(page, -1) {
			if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(m))); err != nil {
				t.Errorf("%s names %s, which does not exist", p, m)
			}
		}
	}
}

// sampleMarker, on the line before a ```hcl block, says how the block is checked when it is not a
// whole configuration by itself:
//
//	<!-- sample: excerpt of examples/x.hcl -->   the block appears verbatim in that file, which validates
//	<!-- sample: with examples/x.hcl,… -->       the block validates loaded together with those files
var sampleMarker = regexp.MustCompile(`<!-- sample: (excerpt of|with) (\S+) -->\n$`)

type hclSample struct {
	page, hcl, how, file string
	line                 int
}

// handWrittenSamples are the ```hcl blocks of the README and of the pages under docs/ that
// `go generate ./docs` does not write (TestExamplesValidate checks those).
func handWrittenSamples(t *testing.T) []hclSample {
	var out []hclSample
	block := regexp.MustCompile("(?ms)^```hcl\n(.*?)^```")
	for p, page := range markdownPages(t) {
		if strings.HasPrefix(page, header) {
			continue
		}
		for _, m := range block.FindAllStringSubmatchIndex(page, -1) {
			s := hclSample{page: p, hcl: page[m[2]:m[3]], line: strings.Count(page[:m[0]], "\n") + 1}
			if mm := sampleMarker.FindStringSubmatch(page[:m[0]]); mm != nil {
				s.how, s.file = mm[1], mm[2]
			}
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b hclSample) int {
		if c := strings.Compare(a.page, b.page); c != 0 {
			return c
		}
		return a.line - b.line
	})
	return out
}

// Every HCL sample of the README and of the hand-written pages is in `flowrun fmt` layout and
// loads as `flowrun validate` loads it, without an error or a warning; one with test blocks passes
// `flowrun test`. A fragment names the example file it belongs to (sampleMarker).
func TestHandWrittenSamplesValidate(t *testing.T) {
	samples := handWrittenSamples(t)
	if len(samples) < 10 {
		t.Fatalf("only %d hcl samples found in the hand-written pages", len(samples))
	}
	for _, s := range samples {
		where := s.page + ":" + strconv.Itoa(s.line)
		if f := string(hclwrite.Format([]byte(s.hcl))); f != s.hcl {
			t.Errorf("%s: the sample is not in `flowrun fmt` layout; it should read:\n%s", where, f)
		}
		files := []string{}
		switch s.how {
		case "excerpt of":
			b, err := os.ReadFile(filepath.Join("..", s.file))
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if !strings.Contains(string(b), s.hcl) {
				t.Errorf("%s: the sample is not, word for word, part of %s", where, s.file)
			}
			files = append(files, filepath.Join("..", s.file))
		default:
			dir := t.TempDir()
			file := filepath.Join(dir, "sample.hcl")
			if err := os.WriteFile(file, []byte(s.hcl), 0o644); err != nil {
				t.Fatal(err)
			}
			if s.how == "with" {
				for _, f := range strings.Split(s.file, ",") {
					files = append(files, filepath.Join("..", f))
				}
			}
			files = append(files, file)
		}
		cfg, diags := config.Load(files, config.Options{Hostname: "worker-1"})
		if len(diags) > 0 {
			var b bytes.Buffer
			config.WriteDiagnostics(&b, cfg.Files(), diags)
			t.Errorf("%s: the sample does not validate:\n%s", where, b.String())
			continue
		}
		if len(cfg.Tests) > 0 {
			var out, errOut bytes.Buffer
			code := cli.Run(context.Background(), append([]string{"test"}, files...), cli.Stdio{In: strings.NewReader(""), Out: &out, Err: &errOut})
			if code != 0 {
				t.Errorf("%s: flowrun test exits %d:\n%s%s", where, code, out.String(), errOut.String())
			}
		}
	}
}

// commandSample is a page's block showing `flowrun validate FILE...` or `flowrun test FILE...`
// and what it prints.
var commandSample = regexp.MustCompile("(?ms)^```\n\\$ flowrun (validate|test) (\\S+(?: \\S+)*)\n(.*?)^```")

// A page that shows what `flowrun validate` or `flowrun test` prints for a file, a mistake or a
// failing test, shows what it prints for that very file, run from the repository's root, so a
// sample names a file that exists and says what flowrun says.
func TestCommandSamplesAreReal(t *testing.T) {
	pages := markdownPages(t)
	t.Chdir("..")
	found := map[string]int{}
	for p, page := range pages {
		for _, m := range commandSample.FindAllStringSubmatch(page, -1) {
			cmd, file, want := m[1], m[2], strings.TrimRight(m[3], "\n")
			found[cmd]++
			var out bytes.Buffer
			args := append([]string{cmd}, strings.Fields(file)...)
			code := cli.Run(context.Background(), args, cli.Stdio{In: strings.NewReader(""), Out: &out, Err: &out})
			if code != 1 {
				t.Errorf("%s: flowrun %s %s exits %d, not 1 as a sample of a failure should", p, cmd, file, code)
			}
			if got := strings.TrimRight(out.String(), "\n"); got != want {
				t.Errorf("%s: the sample of `flowrun %s %s` reads\n%s\nbut it prints\n%s", p, cmd, file, want, got)
			}
		}
	}
	if found["validate"] < 2 || found["test"] < 1 {
		t.Errorf("found samples %v; the README and docs/commands.md show `flowrun validate`, docs/config-tests.md `flowrun test`", found)
	}
}
