package e2e

import (
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// With console logs on a terminal, a file replay shows a progress bar on stderr (SPEC §10
// "Progress"): one line redrawn with \r, which log lines push down instead of breaking. stderr
// is a real pty here.
func TestProgressBarOnTerminal(t *testing.T) {
	dir := t.TempDir()
	var in strings.Builder
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&in, `{"key":"orders","payload":{"n":%d}}`+"\n", i)
	}
	writeFile(t, dir, "orders.jsonl", in.String())
	// A handler of 0.1 s a record, one at a time: the replay lasts long enough to be drawn.
	cfg := writeFile(t, dir, "flow.hcl", `
pipeline "replay" {
  source "file" {
    path = "orders.jsonl"
  }
  concurrency = 1
  handler "exec" {
    command = ["/bin/sh", "-c", "sleep 0.1"]
  }
}
`)
	run := func(format string) string {
		t.Helper()
		ptm, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pty: %v", err)
		}
		defer ptm.Close()
		cmd := exec.Command(bin, "run", "--log-format", format, cfg)
		cmd.Stderr = tty
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		tty.Close() // the child holds it; the master reads until the child is gone
		out := make(chan string)
		go func() {
			b, _ := io.ReadAll(ptm) // ends with EIO once no process holds the terminal
			out <- string(b)
		}()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("flowrun run --log-format %s: %v", format, err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatal("flowrun did not end")
		}
		select {
		case s := <-out:
			return s
		case <-time.After(5 * time.Second):
			t.Fatal("the terminal was not closed")
			return ""
		}
	}

	got := run("console")
	if !strings.Contains(got, "\r\x1b[Kreplay [") || !strings.Contains(got, " left") || !strings.Contains(got, "% ") {
		t.Fatalf("no progress bar on the terminal:\n%q", got)
	}
	// Every log line starts on a line of its own: the bar is cleared before it is written.
	if !strings.Contains(got, "input done") {
		t.Fatalf("no summary line:\n%q", got)
	}
	for _, l := range strings.Split(got, "\n") {
		if strings.Contains(l, "input done") && strings.Contains(l, "replay [") && !strings.Contains(l, "\r\x1b[K") {
			t.Errorf("a log line broke into the bar: %q", l)
		}
	}
	if !strings.HasSuffix(strings.TrimRight(got, "\r\n"), "flowrun stopped") && !strings.HasSuffix(got, "\r\x1b[K") {
		t.Errorf("the bar is left on the terminal at the end: %q", got[max(0, len(got)-200):])
	}

	if got := run("json"); strings.Contains(got, "\x1b[K") || strings.Contains(got, "replay [") {
		t.Errorf("a bar with json logs:\n%q", got)
	}
}
