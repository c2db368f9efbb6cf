package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Metrics finds every flowrun_* metric this package declares: a new one whose vector Metrics does
// not touch would be missing from docs/reference/metrics.md.
func TestMetricsListsEveryDeclaredMetric(t *testing.T) {
	declared := map[string]bool{}
	files, _ := filepath.Glob("*.go")
	re := regexp.MustCompile(`Name:\s*"(flowrun_[a-z_]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			declared[m[1]] = true
		}
	}
	listed := map[string]bool{}
	for _, m := range Metrics() {
		listed[m.Name] = true
		if m.Help == "" || m.Type == "" {
			t.Errorf("%s: no help or type", m.Name)
		}
	}
	for name := range declared {
		if !listed[name] {
			t.Errorf("%s is declared but Metrics does not list it: give its vector a child in Metrics (cli/reference.go)", name)
		}
	}
	if len(declared) < 10 {
		t.Errorf("found only %d declared metrics; did the declarations change form?", len(declared))
	}
}

func TestCommandsHaveHelpAndExitCodes(t *testing.T) {
	for _, c := range Commands() {
		if c.Exits == "" || !strings.Contains(c.Help, "Usage: flowrun "+c.Name) || !strings.Contains(c.Help, "Exit codes: ") {
			t.Errorf("%s: exits %q, help:\n%s", c.Name, c.Exits, c.Help)
		}
	}
}
