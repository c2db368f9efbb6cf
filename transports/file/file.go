// Package file is the file source (SPEC §2, §3, §5): it replays, or follows, the records of a
// stream file, one JSON object per line (package codec).
//
// A delivery's id is its record's line number (1-based); its token is the line number and the
// byte offset just past the line. Malformed lines are logged with their line number, counted and
// skipped; blank lines are skipped silently. Records of the pipeline's dead-letter key
// (Options.DeadLetter) are never delivered. Retry copies and dead letters are appended to the
// same file, through one O_APPEND handle, one write per Settle batch; Settle is idempotent per
// delivery (see Settle).
//
// # Checkpoint
//
// With Options.Checkpoint set, the source keeps, in that file, where a restart resumes:
//
//	{"offset":1234,"line":17,"settled":[[19,40],[42,42]]}
//
// offset is the byte offset just past line number line, and every record up to there has a
// final settlement (skipped lines count as settled). Records settle out of order when handlers
// run concurrently, so settled lines beyond that prefix are listed too, as inclusive ranges of
// line numbers; a restart skips them, so no settled record is handled twice. The file is
// replaced atomically (a temporary file in the same folder, fsync, rename) after a Settle batch
// that moved it, when a followed file is idle, and at Close. When the checkpoint is enabled the
// stream file is fsynced after appending copies, before the checkpoint can pass their originals.
package file

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// pollInterval is how often a followed file is checked for growth at its end.
var pollInterval = 100 * time.Millisecond

// Options configure a file source.
type Options struct {
	Path string // the stream file
	Key  string // records of this key only; "" = every key
	// DeadLetter is the pipeline's dead-letter key: records of that key are never delivered,
	// whatever Key says, so a pipeline never reads back the dead letters it appends (SPEC §2).
	DeadLetter string
	Follow     bool   // at the end of the file, wait for more instead of returning
	Checkpoint string // where the resume position is stored; "" = none
	// Batch is accepted for symmetry with the other sources. Reading is synchronous, one record
	// at a time, and never beyond what the engine has room for (engine.Feed).
	Batch int
}

// Source is the file source. Receive, Settle and Requeue may run concurrently; Close comes last.
type Source struct {
	engine.ErrorHook // malformed records and failed reads count as source errors

	opts Options
	log  zerolog.Logger
	f    *os.File
	lr   *codec.LineReader

	// Reader state, owned by Receive.
	line    int64       // line number of the last line read
	off     int64       // byte offset just past it
	skip    []lineRange // lines settled in an earlier run (from the checkpoint)
	skipIdx int
	retried bool // at EOF of a replay, already waited once for an append in progress
	room    int  // records the engine has room for before the next Room

	appMu   sync.Mutex // guards app, appBuf and appEnds
	app     *os.File   // O_APPEND handle for copies, opened on first use
	appBuf  []byte
	appEnds []int

	mu       sync.Mutex
	pending  []entry // delivered records from the first unsettled one on, in line order
	head     int
	frontier position    // just past the last line read
	carried  []lineRange // the checkpoint's settled ranges, while the reader has not passed them

	cpMu      sync.Mutex
	written   checkpoint // what the checkpoint file holds
	cpFailing bool

	malformed atomic.Int64
	closed    atomic.Bool
	readOff   atomic.Int64 // off, for Progress
	size      atomic.Int64 // the file's size when last looked at, for Progress
}

var _ engine.Source = (*Source)(nil)

type position struct{ off, line int64 }

// lineRange is an inclusive range of line numbers.
type lineRange [2]int64

type entry struct {
	line, start, end int64
	settled          bool
}

// token is what Delivery.Token holds. Settle records on it what is done, so that a delivery
// sent again never has its copy appended twice. Only Settle, on its one goroutine, writes the
// flags.
type token struct {
	line int64 // line number
	end  int64 // byte offset just past the line

	copied  bool  // its retry copy or dead letter is appended
	syncErr error // the fsync after the append failed: it is never settled in this process
	settled bool  // counted as settled; the checkpoint may still have to catch up
}

// New opens the stream file and, when a checkpoint exists, positions the source where it says.
func New(opts Options, log zerolog.Logger) (*Source, error) {
	if opts.Path == "" {
		return nil, errors.New("file: no path")
	}
	f, err := os.Open(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("file: open %s: %w", opts.Path, err)
	}
	s := &Source{opts: opts, log: log.With().Str("path", opts.Path).Logger(), f: f}
	if opts.Checkpoint != "" {
		if err := s.resume(); err != nil {
			f.Close()
			return nil, err
		}
	}
	s.frontier = position{s.off, s.line}
	s.readOff.Store(s.off)
	s.lr = codec.NewLineReader(f, codec.MaxLineSize)
	return s, nil
}

// Progress tells how far a replay has read: bytes read of the file's size (which counts copies
// appended since it started). ok is false when following: there is no end to get to.
func (s *Source) Progress() (read, size int64, ok bool) {
	if s.opts.Follow {
		return 0, 0, false
	}
	if !s.closed.Load() {
		if st, err := s.f.Stat(); err == nil {
			s.size.Store(st.Size())
		}
	}
	read = s.readOff.Load()
	return read, max(read, s.size.Load()), true
}

// Capabilities: a replay is finite; nothing is acknowledged natively.
func (s *Source) Capabilities() engine.Capabilities {
	return engine.Capabilities{} // no acknowledgement: a checkpoint at most
}

// Malformed returns how many malformed lines were skipped so far.
func (s *Source) Malformed() int64 { return s.malformed.Load() }

// Close saves the checkpoint and closes the file handles. It is idempotent.
func (s *Source) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	var errs []error
	if err := s.saveCheckpoint(); err != nil {
		errs = append(errs, err)
	}
	if err := s.f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("file: close %s: %w", s.opts.Path, err))
	}
	s.appMu.Lock()
	if s.app != nil {
		if err := s.app.Close(); err != nil {
			errs = append(errs, fmt.Errorf("file: close %s: %w", s.opts.Path, err))
		}
		s.app = nil
	}
	s.appMu.Unlock()
	return errors.Join(errs...)
}
