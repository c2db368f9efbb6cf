package pipe

import (
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/transporttest"
)

// The conformance suite (transporttest) for a pipe: records on a real pipe in, stdout out.
func TestConformance(t *testing.T) {
	f := transporttest.Features{DeadLetter: transporttest.KindRecord, Finite: true, SharedOutput: true,
		PoisonCommand: "write", PoisonReason: "closed"}
	transporttest.Run(t, f, func(t *testing.T, o transporttest.SourceOptions) transporttest.Harness {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		h := &harness{opts: Options{Key: o.Key, OutRetry: o.Key + ".retry", Batch: o.Batch}, in: r, w: w}
		t.Cleanup(func() {
			h.End(t)
			r.Close()
		})
		return h
	})
}

// harness is the suite's view of a pipe source: lines written to its input, records read from
// its output.
type harness struct {
	opts    Options
	in, w   *os.File
	out     stdout
	built   bool
	endOnce sync.Once
}

// stdout is an output that can be closed on the writer, as when the reader of flowrun's stdout
// has gone.
type stdout struct {
	mu     sync.Mutex
	b      strings.Builder
	closed bool
}

func (o *stdout) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return 0, &os.PathError{Op: "write", Path: "|1", Err: syscall.EPIPE}
	}
	return o.b.Write(p)
}

func (h *harness) Source(t testing.TB) engine.Source {
	if h.built {
		t.Fatal("a pipe's input is read once")
	}
	h.built = true
	return New(h.opts, h.in, codec.NewLineWriter(&h.out), transporttest.Logger(t))
}

func (h *harness) Key() string                                { return h.opts.Key }
func (h *harness) RetryKey() string                           { return h.opts.OutRetry }
func (h *harness) Unsettled(testing.TB) int                   { return 0 }
func (h *harness) Delayed(testing.TB) []transporttest.Delayed { return nil }

func (h *harness) Inject(t testing.TB, msgs ...*engine.Message) {
	if _, err := h.w.Write(transporttest.Records(h.opts.Key, msgs...)); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) End(testing.TB) { h.endOnce.Do(func() { h.w.Close() }) }

func (h *harness) Read(t testing.TB, key string) []*engine.Message {
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	return transporttest.ReadRecords([]byte(h.out.b.String()), key)
}

func (h *harness) Kind(t testing.TB, key string) string {
	if len(h.Read(t, key)) > 0 {
		return transporttest.KindRecord
	}
	return ""
}

// Poison closes stdout's reader: every write fails with EPIPE.
func (h *harness) Poison(testing.TB, string) string {
	h.out.mu.Lock()
	h.out.closed = true
	h.out.mu.Unlock()
	return output
}

func (h *harness) Heal(testing.TB, string) {
	h.out.mu.Lock()
	h.out.closed = false
	h.out.mu.Unlock()
}
