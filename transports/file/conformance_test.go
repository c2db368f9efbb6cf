package file

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/transporttest"
)

// The conformance suite (transporttest) for a file replay with a checkpoint.
func TestConformance(t *testing.T) {
	f := transporttest.Features{IDs: true, DeadLetter: transporttest.KindRecord, Finite: true, Redelivers: true,
		SharedOutput: true, PoisonCommand: "append", PoisonReason: "permission"}
	transporttest.Run(t, f, func(t *testing.T, o transporttest.SourceOptions) transporttest.Harness {
		dir := t.TempDir()
		path := filepath.Join(dir, "in.jsonl")
		writeFile(t, path, "")
		t.Cleanup(func() { appendWrite = (*os.File).Write })
		return &harness{opts: Options{Path: path, Key: o.Key, DeadLetter: o.DeadLetter,
			Checkpoint: filepath.Join(dir, "in.checkpoint"), Batch: o.Batch}}
	})
}

// harness is the suite's view of a file source: records appended in, the file's records out.
type harness struct{ opts Options }

func (h *harness) Source(t testing.TB) engine.Source {
	s, err := New(h.opts, transporttest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (h *harness) Key() string                                { return h.opts.Key }
func (h *harness) RetryKey() string                           { return h.opts.Key }
func (h *harness) End(testing.TB)                             {} // the end of the file is the end
func (h *harness) Unsettled(testing.TB) int                   { return 0 }
func (h *harness) Delayed(testing.TB) []transporttest.Delayed { return nil }

func (h *harness) Inject(t testing.TB, msgs ...*engine.Message) {
	f, err := os.OpenFile(h.opts.Path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(transporttest.Records(h.opts.Key, msgs...)); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) Read(t testing.TB, key string) []*engine.Message {
	b, err := os.ReadFile(h.opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	return transporttest.ReadRecords(b, key)
}

func (h *harness) Kind(t testing.TB, key string) string {
	if len(h.Read(t, key)) > 0 {
		return transporttest.KindRecord
	}
	return ""
}

// Poison makes the stream file unwritable: every copy appended to it fails (as for root, to
// whom a read-only mode means nothing, the kernel's EACCES is played by appendWrite).
func (h *harness) Poison(t testing.TB, _ string) string {
	if err := os.Chmod(h.opts.Path, 0o444); err != nil {
		t.Fatal(err)
	}
	path := h.opts.Path
	appendWrite = func(f *os.File, b []byte) (int, error) {
		if f.Name() == path {
			return 0, &os.PathError{Op: "write", Path: path, Err: syscall.EACCES}
		}
		return f.Write(b)
	}
	return path
}

func (h *harness) Heal(t testing.TB, _ string) {
	appendWrite = (*os.File).Write
	if err := os.Chmod(h.opts.Path, 0o644); err != nil {
		t.Fatal(err)
	}
}
