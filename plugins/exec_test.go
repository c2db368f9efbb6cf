package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shBlock is an exec handler running script with /bin/sh -c.
func shBlock(script, extra string) string {
	return fmt.Sprintf("handler \"exec\" {\n  command = [\"/bin/sh\", \"-c\", %q]\n%s}\n", script, extra)
}

func TestExecExitCodes(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   Outcome
	}{
		{name: "exit 0", script: "exit 0", want: Ack()},
		{name: "exit 75 retries", script: "echo 'gateway busy' >&2; exit 75", want: Retry()},
		{name: "exit 1", script: "exit 1", want: DeadLetter("exec: exit status 1")},
		{name: "last stderr line", script: "echo starting >&2; echo 'card declined' >&2; echo >&2; exit 3",
			want: DeadLetter("exec: exit status 3: card declined")},
		{name: "stderr without newline", script: "printf 'a\\nno newline' >&2; exit 2",
			want: DeadLetter("exec: exit status 2: no newline")},
		{name: "long stderr keeps the tail", script: "head -c 100000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'the end' >&2; exit 4",
			want: DeadLetter("exec: exit status 4: the end")},
		{name: "killed by a signal", script: "kill -9 $$", want: DeadLetter("exec: signal: killed")},
		{name: "stdin not read", script: "exit 0", want: Ack()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := build(t, "h.hcl", shBlock(tt.script, ""))
			res := call(h, message(strings.Repeat("p", 1<<20), nil, 1))
			if res.Outcome != tt.want || res.Err != nil || len(res.Emits) != 0 {
				t.Fatalf("outcome %s, err %v, emits %d; want %s", res.Outcome, res.Err, len(res.Emits), tt.want)
			}
		})
	}
}

func TestExecEnvironmentAndStdin(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_PARENT", "inherited")
	t.Setenv("FLOWRUN_HEADER_STALE", "from flowrun's own environment")
	t.Setenv("FLOWRUN_KEY", "stale")
	h := build(t, "h.hcl", shBlock(`
echo "retry=$FLOWRUN_HEADER_X_RETRY_COUNT"
echo "trace=$FLOWRUN_HEADER_TRACE_ID"
echo "dotted=$FLOWRUN_HEADER_A_B_C"
echo "stale=$${FLOWRUN_HEADER_STALE-unset}"  # $${ escapes HCL interpolation
echo "key=$FLOWRUN_KEY id=$FLOWRUN_ID attempt=$FLOWRUN_ATTEMPT"
echo "parent=$FLOWRUN_TEST_PARENT"
echo "stdin=$(cat)"
`, "  emit_stdout = \"out\"\n"))
	d := message(`{"id":7}`, map[string]string{"x-retry-count": "2", "Trace-Id": "abc def", "a.b c": "dots", "nul": "a\x00b"}, 3)
	res := call(h, d)
	if res.Outcome != Ack() || res.Err != nil {
		t.Fatalf("outcome %s, err %v", res.Outcome, res.Err)
	}
	want := []string{
		"retry=2",
		"trace=abc def",
		"dotted=dots",
		"stale=unset",
		"key=payouts id=1-0 attempt=3",
		"parent=inherited",
		`stdin={"id":7}`,
	}
	if got := payloads(res.Emits); !slices.Equal(got, want) {
		t.Fatalf("stdout:\n got %q\nwant %q", got, want)
	}
}

func TestExecEmitStdout(t *testing.T) {
	h := build(t, "h.hcl", shBlock(`printf '{"id":1}\n\n  \nplain text\r\n{"id":2}'`, "  emit_stdout = \"charges.done\"\n"))
	res := call(h, message("", nil, 1))
	if res.Outcome != Ack() || res.Err != nil {
		t.Fatalf("outcome %s, err %v", res.Outcome, res.Err)
	}
	if got, want := payloads(res.Emits), []string{`{"id":1}`, "plain text", `{"id":2}`}; !slices.Equal(got, want) {
		t.Fatalf("emits %q, want %q", got, want)
	}
	for _, e := range res.Emits {
		if e.To != ToRecord("charges.done") || e.Headers == nil || len(e.Headers) != 0 {
			t.Fatalf("emit to %s with headers %v", e.To, e.Headers)
		}
	}

	t.Run("not on failure", func(t *testing.T) {
		h := build(t, "h.hcl", shBlock("echo half; exit 75", "  emit_stdout = \"k\"\n"))
		if res := call(h, message("", nil, 1)); res.Outcome != Retry() || len(res.Emits) != 0 {
			t.Fatalf("outcome %s, emits %d; want retry without emits", res.Outcome, len(res.Emits))
		}
	})
	t.Run("too much", func(t *testing.T) {
		h := build(t, "h.hcl", shBlock("head -c 5000000 /dev/zero", "  emit_stdout = \"k\"\n"))
		want := DeadLetter(fmt.Sprintf("exec: stdout exceeded %d bytes", execMaxStdout))
		if res := call(h, message("", nil, 1)); res.Outcome != want || len(res.Emits) != 0 {
			t.Fatalf("outcome %s, emits %d; want %s", res.Outcome, len(res.Emits), want)
		}
	})
	t.Run("discarded without emit_stdout", func(t *testing.T) {
		h := build(t, "h.hcl", shBlock("echo hello", ""))
		if res := call(h, message("", nil, 1)); res.Outcome != Ack() || len(res.Emits) != 0 {
			t.Fatalf("outcome %s, emits %d", res.Outcome, len(res.Emits))
		}
	})
}

// A timeout kills the whole process group: the shell and the sleep it started in the background.
func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	for _, stop := range []string{"timeout", "grace period over"} {
		t.Run(stop, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			script := fmt.Sprintf("sleep 60 & echo $! > %s; wait", pidFile)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			timeout := "30s"
			if stop == "timeout" {
				timeout = "300ms"
			} else {
				go func() {
					waitFor(t, func() bool { _, err := os.Stat(pidFile); return err == nil })
					cancel()
				}()
			}
			h := build(t, "h.hcl", shBlock(script, fmt.Sprintf("  timeout = %q\n  emit_stdout = \"k\"\n", timeout)))

			start := time.Now()
			res := Call(ctx, h, message("", nil, 1))
			if el := time.Since(start); el > 10*time.Second {
				t.Fatalf("Handle took %s", el)
			}
			if res.Outcome != Retry() || res.Err == nil {
				t.Fatalf("outcome %s, err %v; want retry with an error", res.Outcome, res.Err)
			}
			if stop == "timeout" && res.Err.Error() != "exec: /bin/sh: timed out after 300ms, process group killed" {
				t.Fatalf("err %q", res.Err)
			}
			if stop != "timeout" && !errors.Is(res.Err, context.Canceled) {
				t.Fatalf("err %v, want context.Canceled", res.Err)
			}

			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return !alive(pid) })
		})
	}
}

// alive reports whether pid runs; a zombie (killed, not yet reaped by an init that may never
// reap) counts as gone.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...; comm may hold spaces, so read after the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecStartFailures(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		command string
		startOK bool
	}{
		{name: "in PATH", command: `["sh", "-c", "exit 0"]`, startOK: true},
		{name: "absolute", command: `["/bin/sh", "-c", "exit 0"]`, startOK: true},
		{name: "missing from PATH", command: `["flowrun-no-such-program"]`},
		{name: "missing path", command: `["./no/such/program"]`},
		{name: "not executable", command: fmt.Sprintf("[%q]", notExec)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := build(t, "h.hcl", fmt.Sprintf("handler \"exec\" {\n  command = %s\n}\n", tt.command))
			err := h.(Starter).Start(context.Background())
			if (err == nil) != tt.startOK {
				t.Fatalf("Start = %v, want ok %v", err, tt.startOK)
			}
			res := call(h, message("", nil, 1))
			if tt.startOK {
				if res.Outcome != Ack() {
					t.Fatalf("outcome %s, err %v", res.Outcome, res.Err)
				}
				return
			}
			// Run anyway (Start not wired, or the file vanished since): retry with the error.
			if res.Outcome != Retry() || res.Err == nil || !strings.HasPrefix(res.Err.Error(), "exec: ") {
				t.Fatalf("outcome %s, err %v; want retry with an exec: error", res.Outcome, res.Err)
			}
		})
	}
}

func TestExecDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "work", "run.sh"), []byte("#!/bin/sh\npwd\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := build(t, filepath.Join(dir, "h.hcl"), "handler \"exec\" {\n  command = [\"./run.sh\"]\n  dir = \"work\"\n  emit_stdout = \"k\"\n}\n")
	if err := h.(Starter).Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	res := call(h, message("", nil, 1))
	want, _ := filepath.EvalSymlinks(filepath.Join(dir, "work"))
	if got := payloads(res.Emits); res.Outcome != Ack() || len(got) != 1 || got[0] != want {
		t.Fatalf("outcome %s, err %v, stdout %q; want ack and %q", res.Outcome, res.Err, got, want)
	}
}

func TestExecConfigDiagnostics(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "h.hcl")
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		src   string
		diags []string
	}{
		{name: "missing command", src: "handler \"exec\" {\n}\n",
			diags: []string{`h.hcl:1:1: Missing required argument: The argument "command" is required, but no definition was found.`}},
		{name: "empty command", src: "handler \"exec\" {\n  command = []\n}\n",
			diags: []string{`h.hcl:2:13: Invalid value: "command" must name a program: ["./bin/charge", "--live"].`}},
		{name: "empty program", src: "handler \"exec\" {\n  command = [\"\", \"x\"]\n}\n",
			diags: []string{`h.hcl:2:13: Invalid value: The program, the first element of "command", must not be empty.`}},
		{name: "a string, not a list", src: "handler \"exec\" {\n  command = \"./charge --live\"\n}\n",
			diags: []string{`h.hcl:2:14: Unsuitable value type: Unsuitable value: list of string required, but have string`}},
		{name: "timeout and dir", src: "handler \"exec\" {\n  command = [\"x\"]\n  timeout = \"0s\"\n  dir = \"f\"\n}\n",
			diags: []string{
				`h.hcl:3:13: Invalid value: "timeout" must be greater than zero.`,
				`h.hcl:4:9: Invalid directory: ` + filepath.Join(dir, "f") + ` is not a directory.`,
			}},
		// A negative duration is refused while decoding; the checks still run.
		{name: "negative timeout", src: "handler \"exec\" {\n  command = [\"x\"]\n  timeout = \"-1s\"\n  dir = \"f\"\n}\n",
			diags: []string{
				`h.hcl:3:13: Invalid value: "timeout" must not be negative.`,
				`h.hcl:4:9: Invalid directory: ` + filepath.Join(dir, "f") + ` is not a directory.`,
			}},
		{name: "missing dir", src: "handler \"exec\" {\n  command = [\"x\"]\n  dir = \"nope\"\n}\n",
			diags: []string{`h.hcl:3:9: Invalid directory: ` + filepath.Join(dir, "nope") + `: no such file or directory.`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, diags := decodeHandler(t, file, tt.src)
			got := formatDiags(diags)
			for i := range got {
				got[i] = strings.TrimPrefix(got[i], dir+string(filepath.Separator))
			}
			if !slices.Equal(got, tt.diags) {
				t.Fatalf("diagnostics:\n got %q\nwant %q", got, tt.diags)
			}
		})
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{
		"x-retry-count": "X_RETRY_COUNT",
		"Trace-Id":      "TRACE_ID",
		"a.b c=d":       "A_B_C_D",
		"snake_case9":   "SNAKE_CASE9",
		"é":             "__",
	} {
		if got := envName(in); got != want {
			t.Errorf("envName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 8}
	for _, w := range []string{"abc", "defgh", "ij", "klmnopqrstuv", "w"} {
		if n, err := tb.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if got := string(tb.buf); got != "pqrstuvw" {
		t.Fatalf("tail %q, want %q", got, "pqrstuvw")
	}
	tb = &tailBuffer{max: 64}
	_, _ = tb.Write([]byte("first\nsecond line  \r\n\n"))
	if got := tb.lastLine(); got != "second line" {
		t.Fatalf("lastLine %q", got)
	}
}
