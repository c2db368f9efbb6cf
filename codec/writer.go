package codec

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/flowrun/flowrun/engine"
)

// LineWriter writes records to one io.Writer (stdout) from many goroutines without ever
// interleaving lines: the pipe transport's copies and the engine's record emits share it.
type LineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewLineWriter wraps w.
func NewLineWriter(w io.Writer) *LineWriter { return &LineWriter{w: w} }

// WriteRecords writes msgs as record lines with one Write call.
func (lw *LineWriter) WriteRecords(msgs ...*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	buf := lw.buf[:0]
	for _, m := range msgs {
		buf = AppendRecord(buf, m)
	}
	_, err := lw.w.Write(buf)
	if cap(buf) <= 1<<20 {
		lw.buf = buf
	}
	if err != nil {
		return fmt.Errorf("codec: write records: %w", err)
	}
	return nil
}

type recordSink struct{ w *LineWriter }

// NewRecordSink returns the sink of record emits to stdout (SPEC §7): each message is written
// under its own Key.
func NewRecordSink(w *LineWriter) engine.Sink { return recordSink{w} }

func (s recordSink) Publish(_ context.Context, msgs ...*engine.Message) error {
	return s.w.WriteRecords(msgs...)
}

// appendLocks serialises the appends of every FileAppender of this process to one path, and
// lets a reader wait for an append in progress (WithAppendLock).
var appendLocks sync.Map // absolute path → *sync.Mutex

func appendLock(path string) *sync.Mutex {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	mu, _ := appendLocks.LoadOrStore(filepath.Clean(path), new(sync.Mutex))
	return mu.(*sync.Mutex)
}

// WithAppendLock runs fn while no FileAppender of this process is writing to path. A replay
// that meets an unfinished last line uses it to tell an append in progress from a file that
// really ends without a newline.
func WithAppendLock(path string, fn func()) {
	mu := appendLock(path)
	mu.Lock()
	defer mu.Unlock()
	fn()
}

// FileAppender appends records to a stream file through one O_APPEND handle, one write per
// call. It is safe for concurrent use and is an engine.Sink.
type FileAppender struct {
	path string
	lock *sync.Mutex // shared by every appender of path in this process
	mu   sync.Mutex  // guards f and buf
	f    *os.File
	buf  []byte
}

// OpenFileAppender opens (creating it when missing, mode 0644) the stream file at path.
func OpenFileAppender(path string) (*FileAppender, error) {
	// Read-write so needsNewline can pread the last byte; O_APPEND places every write at the end.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("codec: open %s: %w", path, err)
	}
	return &FileAppender{path: path, lock: appendLock(path), f: f}, nil
}

// NewFileSink returns the sink of record emits to a stream file (SPEC §7 emit "record" with a
// path). The value also implements io.Closer.
func NewFileSink(path string) (engine.Sink, error) {
	a, err := OpenFileAppender(path)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Publish appends msgs under their own keys.
func (a *FileAppender) Publish(_ context.Context, msgs ...*engine.Message) error {
	return a.Append(msgs...)
}

// Append writes msgs as record lines in one write. When the file does not end with a newline
// (a last line written without one), a newline goes first, so a record never joins another.
func (a *FileAppender) Append(msgs ...*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return fmt.Errorf("codec: append %s: %w", a.path, os.ErrClosed)
	}
	a.lock.Lock()
	defer a.lock.Unlock()
	buf := a.buf[:0]
	if nl, err := a.needsNewline(); err != nil {
		return err
	} else if nl {
		buf = append(buf, '\n')
	}
	for _, m := range msgs {
		buf = AppendRecord(buf, m)
	}
	_, err := a.f.Write(buf)
	if cap(buf) <= 1<<20 {
		a.buf = buf
	}
	if err != nil {
		return fmt.Errorf("codec: append %s: %w", a.path, err)
	}
	return nil
}

func (a *FileAppender) needsNewline() (bool, error) {
	st, err := a.f.Stat()
	if err != nil {
		return false, fmt.Errorf("codec: stat %s: %w", a.path, err)
	}
	if st.Size() == 0 {
		return false, nil
	}
	var last [1]byte
	if _, err := a.f.ReadAt(last[:], st.Size()-1); err != nil {
		return false, fmt.Errorf("codec: read %s: %w", a.path, err)
	}
	return last[0] != '\n', nil
}

// Sync flushes the file to stable storage.
func (a *FileAppender) Sync() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("codec: sync %s: %w", a.path, err)
	}
	return nil
}

// Close closes the file; it is idempotent.
func (a *FileAppender) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	if err != nil {
		return fmt.Errorf("codec: close %s: %w", a.path, err)
	}
	return nil
}
