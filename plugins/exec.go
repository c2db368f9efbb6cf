package plugins

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Defaults and limits of the exec handler.
const (
	execDefaultTimeout = 30 * time.Second
	// EX_TEMPFAIL from sysexits.h: the command asks to be run again later.
	execExitRetry = 75
	// Environment variables the handler sets; inherited ones of these names are dropped.
	execEnvHeaderPrefix = "FLOWRUN_HEADER_"
	execEnvKey          = "FLOWRUN_KEY"
	execEnvID           = "FLOWRUN_ID"
	execEnvAttempt      = "FLOWRUN_ATTEMPT"
	// Only the end of stderr is kept: its last line goes into the dead-letter reason.
	execStderrTail = 4 << 10
	execReasonLine = 256
	// emit_stdout collects at most this much; more is a dead letter, never a silent cut.
	execMaxStdout = 4 << 20
	// After the command exits (or is killed), how long its pipes may stay open, held by a
	// background process, before they are closed under it.
	execWaitDelay = 2 * time.Second
)

func init() {
	Register(Spec[execConfig]{
		Name:      "exec",
		Body:      execBody,
		Doc:       "runs a command per message, payload on stdin; exit 0 acks, 75 retries, others dead-letter",
		Validate:  validateExec,
		Provision: newExecHandler,
		Mock:      builtinMock{name: "exec", decode: decodeExecMock},
	})
}

// execConfig is the body of `handler "exec" {}`.
type execConfig struct {
	Command    []string      `hcl:"command"`
	Timeout    time.Duration `hcl:"timeout,optional"`
	Dir        string        `hcl:"dir,optional"`
	EmitStdout string        `hcl:"emit_stdout,optional"`
}

func validateExec(c execConfig, b Block) error {
	var errs []error
	switch {
	case len(c.Command) == 0:
		errs = append(errs, b.Errorf("command", "Invalid value", `"command" must name a program: ["./bin/charge", "--live"].`))
	case c.Command[0] == "":
		errs = append(errs, b.Errorf("command", "Invalid value", `The program, the first element of "command", must not be empty.`))
	}
	for _, arg := range c.Command {
		if strings.IndexByte(arg, 0) >= 0 {
			errs = append(errs, b.Errorf("command", "Invalid value", `"command" must not contain NUL characters.`))
			break
		}
	}
	if c.Timeout <= 0 {
		errs = append(errs, b.Errorf("timeout", "Invalid value", "%q must be greater than zero.", "timeout"))
	}
	if c.Dir != "" {
		dir := b.Path(c.Dir)
		if fi, err := os.Stat(dir); err != nil {
			errs = append(errs, b.Errorf("dir", "Invalid directory", "%s", unwrapPathError(err)))
		} else if !fi.IsDir() {
			errs = append(errs, b.Errorf("dir", "Invalid directory", "%s is not a directory.", dir))
		}
	}
	return errors.Join(errs...)
}

// execRunner runs a prepared command to its end, writing to its Stdout and Stderr. It returns
// nil for exit 0; for any other exit, an error with an ExitCode method whose Error is the exit
// status ("exit status 3", "signal: killed"), as *exec.ExitError; any other error when the
// command could not run or was stopped. (*exec.Cmd).Run is the real one; a test's mock stands in
// for the process.
type execRunner func(cmd *exec.Cmd) error

// execHandler runs one process per delivery. It is safe for concurrent use.
type execHandler struct {
	argv       []string
	dir        string
	timeout    time.Duration
	emitStdout string
	baseEnv    []string
	log        zerolog.Logger
	run        execRunner
}

var (
	_ Handler = (*execHandler)(nil)
	_ Starter = (*execHandler)(nil)
)

func newExecHandler(_ context.Context, cfg execConfig, env Env) (Handler, error) {
	// Variables of the names this handler sets are dropped from the inherited environment, so a
	// header this message lacks never shows through from flowrun's own environment.
	var base []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, execEnvHeaderPrefix) || name == execEnvKey || name == execEnvID || name == execEnvAttempt {
			continue
		}
		base = append(base, kv)
	}
	h := &execHandler{
		argv:       cfg.Command,
		timeout:    cfg.Timeout,
		emitStdout: cfg.EmitStdout,
		baseEnv:    base,
		log:        env.Logger,
		run:        (*exec.Cmd).Run,
	}
	if env.runner != nil {
		h.run = env.runner // a test's mock stands in for the process
	}
	if cfg.Dir != "" {
		h.dir = env.Path(cfg.Dir)
	}
	return h, nil
}

// Start fails the run early when the program cannot be found, rather than retrying every
// message until it dead-letters.
func (h *execHandler) Start(context.Context) error {
	prog := h.argv[0]
	if !strings.ContainsRune(prog, filepath.Separator) {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("exec: %w", err)
		}
		return nil
	}
	path := prog
	if !filepath.IsAbs(path) && h.dir != "" {
		path = filepath.Join(h.dir, path) // a relative program is run from dir
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("exec: %s is not an executable file", path)
	}
	return nil
}

func (h *execHandler) Handle(ctx context.Context, m Message, emit *Emitter) (Outcome, error) {
	tctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()

	cmd := exec.CommandContext(tctx, h.argv[0], h.argv[1:]...)
	cmd.Dir = h.dir
	cmd.Env = h.environ(m)
	cmd.Stdin = m.PayloadReader()
	stderr := &tailBuffer{max: execStderrTail}
	cmd.Stderr = stderr
	var stdout *cappedBuffer
	if h.emitStdout != "" || m.inRun() { // a workflow step records stdout as its output
		stdout = &cappedBuffer{max: execMaxStdout}
		cmd.Stdout = stdout
	} // else the child's stdout is /dev/null: flowrun's own stdout may carry records.
	// Its own process group, so that a timeout kills whatever the command started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = execWaitDelay

	err := h.run(cmd)
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay):
		// ErrWaitDelay: exit 0, but something it left behind held its output open.
		if err != nil {
			h.log.Warn().Str("command", h.argv[0]).Msg("exec: command exited 0 but left a process holding its output; output closed")
		}
		return h.success(stdout, emit, m.inRun()), nil
	case ctx.Err() != nil:
		return Retry(), fmt.Errorf("exec: %s: stopped at shutdown: %w", h.argv[0], ctx.Err())
	case tctx.Err() != nil:
		return Retry(), fmt.Errorf("exec: %s: timed out after %s, process group killed", h.argv[0], h.timeout)
	}
	var ee interface {
		error
		ExitCode() int
	}
	if !errors.As(err, &ee) {
		// It never ran: not found, not executable, out of resources.
		return Retry(), fmt.Errorf("exec: %w", err)
	}
	if ee.ExitCode() == execExitRetry {
		if line := stderr.lastLine(); line != "" {
			h.log.Debug().Str("command", h.argv[0]).Str("stderr", line).Msg("exec: command asked to retry")
		}
		return Retry(), nil
	}
	reason := "exec: " + ee.Error() // "exit status 3", "signal: killed"
	if line := stderr.lastLine(); line != "" {
		reason += ": " + line
	}
	return DeadLetter(reason), nil
}

// success acks, emitting stdout's lines as records when emit_stdout is set and recording stdout
// as the output in a workflow step.
func (h *execHandler) success(stdout *cappedBuffer, emit *Emitter, inRun bool) Outcome {
	if stdout == nil {
		return Ack()
	}
	if stdout.over {
		return DeadLetter(fmt.Sprintf("exec: stdout exceeded %d bytes", execMaxStdout))
	}
	if inRun {
		if len(stdout.buf) > maxOutput {
			return DeadLetter(fmt.Sprintf("exec: stdout exceeds %d bytes, the most a step's output may be", maxOutput))
		}
		emit.Output(stdoutOutput(stdout.buf))
	}
	if h.emitStdout == "" {
		return Ack()
	}
	to := ToRecord(h.emitStdout)
	for line := range bytes.SplitSeq(stdout.buf, []byte{'\n'}) {
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		emit.Emit(to, line, nil)
	}
	return Ack()
}

// environ is the inherited environment plus the message's headers, key, id and attempt.
func (h *execHandler) environ(m Message) []string {
	env := make([]string, 0, len(h.baseEnv)+8)
	env = append(env, h.baseEnv...)
	for k, v := range m.Headers() {
		if k == "" || strings.IndexByte(v, 0) >= 0 {
			continue // no variable can carry it
		}
		env = append(env, execEnvHeaderPrefix+envName(k)+"="+v)
	}
	return append(env,
		execEnvKey+"="+strings.ReplaceAll(m.Key(), "\x00", ""),
		execEnvID+"="+m.ID(),
		execEnvAttempt+"="+strconv.Itoa(m.Attempt()),
	)
}

// envName turns a header name into a variable name: upper case, and every character other than
// a letter, digit or '_' (such as '-') as '_'.
func envName(header string) string {
	b := []byte(strings.ToUpper(header))
	for i, c := range b {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			b[i] = '_'
		}
	}
	return string(b)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = t.buf[:copy(t.buf, t.buf[over:])]
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// lastLine is the last non-blank line, cut to a length that fits in a header.
func (t *tailBuffer) lastLine() string {
	s := strings.TrimRight(string(t.buf), " \t\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimSpace(s)
	if len(s) > execReasonLine {
		s = s[:execReasonLine] + "…"
	}
	return strings.ToValidUTF8(s, "")
}

// cappedBuffer collects up to max bytes and then notes that more came, still accepting writes
// so the command never blocks on a full pipe.
type cappedBuffer struct {
	buf  []byte
	max  int
	over bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.over || len(c.buf)+len(p) > c.max {
		c.over = true
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// HandlerTimeout lets validate warn when a process may outlast shutdown_timeout (SPEC §12).
func (c execConfig) HandlerTimeout() time.Duration { return c.Timeout }
