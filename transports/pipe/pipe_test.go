package pipe

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/transporttest"
)

func TestReceive(t *testing.T) {
	input := `{"key":"a","headers":{"h":"1"},"payload":{"n":1}}
{"key":"b","payload":"two"}

not json
{"key":"a","payload":[3]}
{"key":5}
{"key":"a","payload":"last"}`
	tests := []struct {
		name     string
		key      string
		payloads []string
	}{
		{"every key", "", []string{`{"n":1}`, "two", "[3]", "last"}},
		{"key filter", "a", []string{`{"n":1}`, "[3]", "last"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs transporttest.Logs
			s := New(Options{Key: tt.key, OutRetry: "r", Batch: 2}, strings.NewReader(input), codec.NewLineWriter(io.Discard), zerolog.New(&logs))
			got := transporttest.Receive(t, s, 1).Drain(t)
			var payloads []string
			for _, d := range got {
				payloads = append(payloads, string(d.Payload))
				if d.ID != "" || d.Headers == nil {
					t.Errorf("delivery id %q headers %v", d.ID, d.Headers)
				}
			}
			if strings.Join(payloads, "|") != strings.Join(tt.payloads, "|") {
				t.Fatalf("payloads = %v, want %v", payloads, tt.payloads)
			}
			if !maps.Equal(got[0].Headers, map[string]string{"h": "1"}) || got[0].Key != "a" {
				t.Errorf("first = %s %v", got[0].Key, got[0].Headers)
			}
			// Malformed lines 4 and 6 are logged with their line numbers.
			var lines []float64
			for _, e := range logs.Entries(t) {
				if e["level"] == "warn" && e["message"] == "malformed record skipped" {
					lines = append(lines, e["line"].(float64))
				}
			}
			if len(lines) != 2 || lines[0] != 4 || lines[1] != 6 {
				t.Fatalf("malformed lines logged: %v, want [4 6]", lines)
			}
			if s.Malformed() != 2 {
				t.Errorf("Malformed = %d", s.Malformed())
			}
		})
	}
}

func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	in := io.MultiReader(strings.NewReader(`{"key":"a","payload":1}`+"\n"), errReader{boom})
	s := New(Options{}, in, codec.NewLineWriter(io.Discard), zerolog.Nop())
	got, err := transporttest.Receive(t, s, 1).Rest(t)
	if len(got) != 1 || !errors.Is(err, boom) {
		t.Fatalf("got %d deliveries, err %v", len(got), err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// A read that blocks forever does not keep Receive from returning on cancellation.
func TestCancelWhileReadBlocks(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	s := New(Options{}, pr, codec.NewLineWriter(io.Discard), zerolog.Nop())
	r := transporttest.Receive(t, s, 1)
	if _, err := pw.Write([]byte(`{"key":"a","payload":1}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if d := r.Next(t); string(d.Payload) != "1" {
		t.Fatalf("payload %s", d.Payload)
	}
	r.Stop(t) // fails the test unless Receive returns
	if err := r.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive = %v, want context.Canceled", err)
	}
}

// A cancellation while the engine does not take the delivery also returns.
func TestCancelWhileSending(t *testing.T) {
	s := New(Options{}, strings.NewReader(`{"key":"a","payload":1}`+"\n"), codec.NewLineWriter(io.Discard), zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	full := engine.NewQueue(1)
	full.Push(ctx, []*engine.Delivery{{}}) // nobody takes from it: the engine does not take the delivery
	go func() { done <- s.Receive(ctx, full) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Receive = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Receive did not return after cancel")
	}
}

func TestNoOutRetry(t *testing.T) {
	var out bytes.Buffer
	s := New(Options{}, strings.NewReader(""), codec.NewLineWriter(&out), zerolog.Nop())
	d := &engine.Delivery{Message: engine.Message{Key: "k", Headers: map[string]string{}}, Attempt: 1}
	if f := transporttest.OnlyFault(t, s.Settle(context.Background(), []engine.Settlement{{Delivery: d, Action: engine.ActRequeue, Copy: d.RetryCopy()}})); !errors.Is(f.Err, engine.ErrUnsupported) || !f.Permanent {
		t.Fatalf("fault = %+v", f)
	}
	if err := s.Requeue(context.Background(), []*engine.Message{{Key: "k"}}); !errors.Is(err, engine.ErrUnsupported) {
		t.Fatalf("Requeue = %v", err)
	}
	if out.Len() != 0 {
		t.Fatalf("wrote %q", out.String())
	}
}

// flakyWriter fails its writes from the fail-th on with err, until healed.
type flakyWriter struct {
	bytes.Buffer
	writes, fail int
	err          error
}

func (w *flakyWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.fail > 0 && w.writes >= w.fail {
		return 0, w.err
	}
	return w.Buffer.Write(p)
}

// A write that fails part way through a batch: the copies before it are marked written, so the
// engine's resend writes each copy exactly once, in order.
func TestSettleResendWritesOnce(t *testing.T) {
	out := &flakyWriter{fail: 2, err: &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.EAGAIN}}
	s := New(Options{OutRetry: "r"}, strings.NewReader(""), codec.NewLineWriter(out), zerolog.Nop())
	var batch []engine.Settlement
	for i := range 3 {
		d := &engine.Delivery{Message: engine.Message{Key: "k", Payload: []byte{'1' + byte(i)}}, Attempt: 1, Token: &token{}}
		batch = append(batch, engine.Settlement{Delivery: d, Action: engine.ActRequeue, Copy: d.RetryCopy()})
	}
	batch = append(batch, engine.Settlement{Delivery: &engine.Delivery{Token: &token{}}, Action: engine.ActAck})

	fs := transporttest.Faults(t, s.Settle(context.Background(), batch))
	if len(fs) != 2 || fs[0].Index != 1 || fs[1].Index != 2 {
		t.Fatalf("faults = %+v, want deliveries 1 and 2", fs)
	}
	for _, f := range fs {
		if f.Permanent || f.Command != "write" || f.Key != "stdout" {
			t.Fatalf("fault = %+v, want a transient write fault", f)
		}
	}
	out.fail = 0
	if err := s.Settle(context.Background(), batch); err != nil { // the engine's resend
		t.Fatalf("resend: %v", err)
	}
	want := `{"key":"r","headers":{"x-retry-count":"1"},"payload":1}` + "\n" +
		`{"key":"r","headers":{"x-retry-count":"1"},"payload":2}` + "\n" +
		`{"key":"r","headers":{"x-retry-count":"1"},"payload":3}` + "\n"
	if out.String() != want {
		t.Fatalf("stdout =\n%s\nwant each copy once:\n%s", out.String(), want)
	}
}

// A reader that has gone (EPIPE) is permanent: the engine does not write there again.
func TestSettleBrokenPipe(t *testing.T) {
	out := &flakyWriter{fail: 1, err: &os.PathError{Op: "write", Path: "|1", Err: syscall.EPIPE}}
	s := New(Options{OutRetry: "r"}, strings.NewReader(""), codec.NewLineWriter(out), zerolog.Nop())
	d := &engine.Delivery{Message: engine.Message{Key: "k"}, Attempt: 1, Token: &token{}}
	dead := d.Message.Clone()
	f := transporttest.OnlyFault(t, s.Settle(context.Background(), []engine.Settlement{{Delivery: d, Action: engine.ActDeadLetter, Copy: dead, DeadLetterKey: "k.dlq"}}))
	if !f.Permanent || f.Reason != "closed" || !errors.Is(f.Err, syscall.EPIPE) {
		t.Fatalf("fault = %+v", f)
	}
	if f := transporttest.OnlyFault(t, s.Requeue(context.Background(), []*engine.Message{{Key: "k"}})); f.Reason != "closed" || !f.Permanent {
		t.Fatalf("Requeue fault = %+v", f)
	}
}
