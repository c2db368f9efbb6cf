package transporttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// Faults returns the faults of a Settle or Requeue error, failing the test unless err is an
// *engine.SettleError (nil for nil).
func Faults(t testing.TB, err error) []engine.Fault {
	t.Helper()
	if err == nil {
		return nil
	}
	var se *engine.SettleError
	if !errors.As(err, &se) {
		t.Fatalf("%v (%T), want an *engine.SettleError naming the deliveries that failed", err, err)
	}
	return se.Faults
}

// OnlyFault is the one fault of err, failing the test unless there is exactly one.
func OnlyFault(t testing.TB, err error) engine.Fault {
	t.Helper()
	fs := Faults(t, err)
	if len(fs) != 1 {
		t.Fatalf("%v: want exactly one fault", err)
	}
	return fs[0]
}

// WaitFor polls cond every few milliseconds until it holds, failing the test after Timeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", Timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Logs collects a source's zerolog JSON lines (zerolog.New(&logs)) from any goroutine.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// Entries decodes the lines written so far.
func (l *Logs) Entries(t testing.TB) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// RunPipeline runs one pipeline of the engine over its source until the returned stop is
// called (or the test ends); stop returns Run's error. Unset fields get a test's defaults: a
// name and a 5s shutdown_timeout (the zero Logger logs nothing).
func RunPipeline(t testing.TB, p *engine.Pipeline) (stop func() error) {
	t.Helper()
	if p.Name == "" {
		p.Name = "p"
	}
	if p.ShutdownTimeout == 0 {
		p.ShutdownTimeout = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engine.New(engine.Options{}, p).Run(ctx) }()
	var (
		once sync.Once
		err  error
	)
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(Timeout):
				t.Errorf("the engine did not stop within %s", Timeout)
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// Logger is a source's logger in a test: warnings and errors go to the test's log.
func Logger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// ReadRecords returns the records of key in text, JSON lines as a stream file or stdout holds
// them (SPEC §3), in order; other lines are passed over.
func ReadRecords(text []byte, key string) []*engine.Message {
	var out []*engine.Message
	for _, line := range bytes.Split(text, []byte("\n")) {
		if m, err := codec.DecodeRecord(line); err == nil && m.Key == key {
			out = append(out, &m)
		}
	}
	return out
}

// Records encodes msgs as record lines of key, as a harness writes a file's or a pipe's input.
func Records(key string, msgs ...*engine.Message) []byte {
	var b []byte
	for _, m := range msgs {
		c := *m
		c.Key = key
		b = codec.AppendRecord(b, &c)
	}
	return b
}
