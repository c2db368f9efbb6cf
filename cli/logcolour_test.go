package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// Console logs are coloured only on a terminal with NO_COLOR unset: `--log-format console` with
// stderr redirected to a file writes no ANSI escape codes (docs/logging.md).
func TestConsoleColourOnlyOnATerminal(t *testing.T) {
	noEnv := func(string) string { return "" }
	noColor := func(k string) string {
		if k == "NO_COLOR" {
			return "1"
		}
		return ""
	}
	file, err := os.Create(filepath.Join(t.TempDir(), "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()

	if !colour(tty, noEnv) {
		t.Errorf("no colour on a terminal without NO_COLOR")
	}
	if colour(tty, noColor) {
		t.Errorf("colour on a terminal with NO_COLOR=1")
	}
	if colour(file, noEnv) {
		t.Errorf("colour on a regular file")
	}
	var b strings.Builder
	if colour(&b, noEnv) {
		t.Errorf("colour on a buffer")
	}

	// What the logger writes to the file: the console layout, no escape codes.
	log, err := newLogger(file, "console", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Warn().Str("pipeline", "orders").Msg("dead-lettered")
	got, err := os.ReadFile(file.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "dead-lettered") || !strings.Contains(string(got), "pipeline=orders") {
		t.Errorf("console log to a file reads %q", got)
	}
	if strings.Contains(string(got), "\x1b[") {
		t.Errorf("console log to a file has ANSI escape codes: %q", got)
	}
}
