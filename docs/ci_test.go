package docs

import (
	"os"
	"strings"
	"testing"
)

// TestCIRunsTheREADMECommand: the README's first code block gives a newcomer two commands, an
// example and the tests; .ci/run must run exactly the second, nothing else.
func TestCIRunsTheREADMECommand(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	for _, l := range strings.Split(block, "\n") {
		if cmd, _, _ := strings.Cut(l, "#"); strings.TrimSpace(cmd) != "" {
			cmds = append(cmds, strings.TrimSpace(cmd))
		}
	}
	if !ok || len(cmds) != 2 {
		t.Fatalf("README's first sh block holds %q; want the example and the test command", cmds)
	}
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var run []string
	for _, l := range strings.Split(string(ci), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "", strings.HasPrefix(l, "#"), l == "set -euo pipefail", l == "set -euxo pipefail", l == `cd "$(dirname "$0")/.."`:
		default:
			run = append(run, l)
		}
	}
	// .ci/run installs what the tests need, then runs the README's test command as it stands,
	// last; nothing before it runs tests of its own.
	if len(run) == 0 || run[len(run)-1] != cmds[1] {
		t.Fatalf(".ci/run runs %q; want the README's test command %q last", run, cmds[1])
	}
	for _, l := range run[:len(run)-1] {
		if strings.Contains(l, "go test") || strings.Contains(l, "test.sh") {
			t.Errorf(".ci/run runs tests before the README's command: %q", l)
		}
	}
	if !strings.Contains(string(ci), "apt-get install") || !strings.Contains(string(ci), "command -v redis-server") {
		t.Errorf(".ci/run does not install redis-server where it is missing:\n%s", ci)
	}
}
