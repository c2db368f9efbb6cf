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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// pollInterval is how often a followed file is checked for growth at its end.
var pollInterval = 100 * time.Millisecond

// The file operations Settle depends on, replaceable by tests to inject failures.
var (
	appendWrite     = (*os.File).Write
	appendSync      = (*os.File).Sync
	writeCheckpoint = writeFileAtomic
)

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

type checkpoint struct {
	Offset  int64       `json:"offset"`
	Line    int64       `json:"line"`
	Settled []lineRange `json:"settled,omitempty"`
}

func (c checkpoint) equal(d checkpoint) bool {
	return c.Offset == d.Offset && c.Line == d.Line && slices.Equal(c.Settled, d.Settled)
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

// resume reads the checkpoint, checks it against the file and seeks there.
func (s *Source) resume() error {
	data, err := os.ReadFile(s.opts.Checkpoint)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("file: read checkpoint %s: %w", s.opts.Checkpoint, err)
	}
	var cp checkpoint
	if err := json.Unmarshal(data, &cp); err != nil || cp.Offset < 0 || cp.Line < 0 {
		return fmt.Errorf("file: checkpoint %s is not {\"offset\":N,\"line\":N}: %q", s.opts.Checkpoint, data)
	}
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("file: stat %s: %w", s.opts.Path, err)
	}
	off := cp.Offset
	if off > st.Size() {
		return fmt.Errorf("file: checkpoint %s is at byte %d but %s has %d bytes: the file was truncated or replaced; remove the checkpoint to replay it",
			s.opts.Checkpoint, off, s.opts.Path, st.Size())
	}
	if off > 0 && off < st.Size() {
		// A checkpoint falls just past a newline, or just before one when it was taken after a
		// last line that had none (an append added it since): that newline ends the line it
		// already counted.
		var b [2]byte
		if _, err := s.f.ReadAt(b[:], off-1); err != nil {
			return fmt.Errorf("file: read %s: %w", s.opts.Path, err)
		}
		switch {
		case b[0] == '\n':
		case b[1] == '\n':
			off++
		default:
			return fmt.Errorf("file: checkpoint %s (byte %d) does not fall on a line boundary of %s: the file was replaced; remove the checkpoint to replay it",
				s.opts.Checkpoint, cp.Offset, s.opts.Path)
		}
	}
	if _, err := s.f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("file: seek %s: %w", s.opts.Path, err)
	}
	s.off, s.line = off, cp.Line
	s.skip = cp.Settled
	s.carried = slices.Clone(cp.Settled)
	s.written = cp
	s.log.Info().Int64("offset", off).Int64("line", cp.Line).Msg("resuming from checkpoint")
	return nil
}

// Capabilities: a replay is finite; nothing is acknowledged natively.
func (s *Source) Capabilities() engine.Capabilities {
	return engine.Capabilities{} // no acknowledgement: a checkpoint at most
}

// Malformed returns how many malformed lines were skipped so far.
func (s *Source) Malformed() int64 { return s.malformed.Load() }

// Receive reads records and hands those of the wanted key to feed. Without Follow it returns nil
// when a read meets the end of the file, so copies appended before then are read too.
func (s *Source) Receive(ctx context.Context, feed engine.Feed) error {
	var timer *time.Timer
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if s.room == 0 {
			// Read no more records than the engine can take (engine.Feed).
			if s.room = feed.Room(ctx); s.room == 0 {
				return ctx.Err()
			}
		}
		line, size, err := s.lr.Next()
		if err == nil || errors.Is(err, codec.ErrLineTooLong) {
			s.retried = false
			if err := s.handle(ctx, feed, line, size, err); err != nil {
				return err
			}
			continue
		}
		if !errors.Is(err, io.EOF) {
			return fmt.Errorf("file: read %s: %w", s.opts.Path, err)
		}
		if !s.opts.Follow {
			if s.lr.Pending() == 0 {
				return nil
			}
			if !s.retried {
				// An unfinished last line may be a copy this process is appending: let the
				// append finish and read again before calling it a line without a newline.
				s.retried = true
				codec.WithAppendLock(s.opts.Path, func() {})
				continue
			}
			line, size, err := s.lr.TakePending()
			return s.handle(ctx, feed, line, size, err)
		}
		s.flushIdle()
		if timer == nil {
			timer = time.NewTimer(pollInterval)
			defer timer.Stop()
		} else {
			timer.Reset(pollInterval)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// handle deals with one line read from the file.
func (s *Source) handle(ctx context.Context, feed engine.Feed, line []byte, size int, lineErr error) error {
	s.line++
	n, start := s.line, s.off
	s.off += int64(size)
	s.readOff.Store(s.off)
	if s.settledBefore(n) {
		s.advance(n, start, true)
		return nil
	}
	if lineErr != nil {
		s.skipMalformed(n, lineErr)
		s.advance(n, start, false)
		return nil
	}
	if blank(line) {
		s.advance(n, start, false)
		return nil
	}
	m, err := codec.DecodeRecord(line)
	if err != nil {
		s.skipMalformed(n, err)
		s.advance(n, start, false)
		return nil
	}
	if (s.opts.Key != "" && m.Key != s.opts.Key) || (s.opts.DeadLetter != "" && m.Key == s.opts.DeadLetter) {
		s.advance(n, start, false)
		return nil
	}
	m.ID = strconv.FormatInt(n, 10)
	d := &engine.Delivery{Message: m, Token: &token{line: n, end: s.off}}
	s.mu.Lock()
	s.pending = append(s.pending, entry{line: n, start: start, end: s.off})
	s.frontier = position{s.off, n}
	s.mu.Unlock()
	s.room--
	if !feed.Push(ctx, []*engine.Delivery{d}) {
		return ctx.Err() // never handed over: it stays unsettled, so the checkpoint stops before it
	}
	return nil
}

func (s *Source) skipMalformed(n int64, err error) {
	s.malformed.Add(1)
	s.ReportError()
	s.log.Warn().Int64("line", n).Err(err).Msg("malformed record skipped")
}

// settledBefore reports whether line n was settled in an earlier run.
func (s *Source) settledBefore(n int64) bool {
	for s.skipIdx < len(s.skip) && s.skip[s.skipIdx][1] < n {
		s.skipIdx++
	}
	return s.skipIdx < len(s.skip) && s.skip[s.skipIdx][0] <= n
}

// advance moves the frontier past a line that is not delivered. A line settled in an earlier
// run is recorded while an unsettled record precedes it, so the next checkpoint still lists it.
func (s *Source) advance(n, start int64, settledBefore bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if settledBefore && s.head < len(s.pending) {
		s.pending = append(s.pending, entry{line: n, start: start, end: s.off, settled: true})
	}
	s.frontier = position{s.off, n}
	for len(s.carried) > 0 && s.carried[0][1] <= n {
		s.carried = s.carried[1:]
	}
}

func blank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// Settle executes a batch: copies first (one write), then the originals count as settled, then
// the checkpoint is saved. It reports what failed per delivery (engine.SettleError) and records
// on each delivery's token what is done, so a batch sent again after a partial failure never
// appends a copy or a dead letter twice: a resend only does what is left (the append, the
// fsync or the checkpoint).
//
// Failures are classified by classify: the stream file or the checkpoint's folder being
// unwritable (a permission error, a read-only filesystem, a missing folder) is permanent, and so
// is a failed fsync, since the kernel may have dropped the written pages and a second fsync would
// hide that; the delivery is then left unsettled, so the checkpoint stays before it and a restart
// handles it again (a possible duplicate, never a loss). A full disk (ENOSPC, EDQUOT) and other
// I/O errors are transient: the engine sends the delivery again.
func (s *Source) Settle(ctx context.Context, batch []engine.Settlement) error {
	var (
		se      engine.SettleError
		failed  = make([]bool, len(batch))
		toks    = make([]*token, len(batch))
		copies  []*engine.Message
		copyIdx []int // batch index of each copy
	)
	fail := func(i int, command, key string, err error) {
		reason, permanent := classify(err)
		se.Add(engine.Fault{Index: i, Command: command, Key: key, Reason: reason, Permanent: permanent, Err: err})
		failed[i] = true
	}
	for i, st := range batch {
		var tok *token
		if st.Delivery != nil {
			tok, _ = st.Delivery.Token.(*token)
		}
		if tok == nil {
			fail(i, "settle", s.opts.Path, fmt.Errorf("file: settle: delivery without a file token: %w", engine.ErrPermanent))
			continue
		}
		c, err := codec.RecordCopy(st, "") // a retry copy is appended under its own key
		if err != nil {
			fail(i, st.Action.String(), s.opts.Path, fmt.Errorf("file: settle line %d: %w", tok.line, err))
			continue
		}
		toks[i] = tok
		if c == nil || tok.settled || tok.copied {
			continue // nothing to write: only the checkpoint may be left to do
		}
		copies = append(copies, c)
		copyIdx = append(copyIdx, i)
	}

	if len(copies) > 0 {
		n, err := s.appendRecords(copies)
		for _, i := range copyIdx[:n] {
			toks[i].copied = true
		}
		for _, i := range copyIdx[n:] {
			fail(i, "append", s.opts.Path, err)
		}
	}

	// Before the checkpoint may pass the originals, their copies must be on disk.
	if s.opts.Checkpoint != "" && len(copies) > 0 {
		var written []int
		for _, i := range copyIdx {
			if !failed[i] {
				written = append(written, i)
			}
		}
		if len(written) > 0 {
			if err := s.syncAppender(); err != nil {
				for _, i := range written {
					toks[i].syncErr = errFsync{err}
				}
			}
		}
	}

	done := make([]int64, 0, len(batch))
	for i, tok := range toks {
		switch {
		case failed[i] || tok.settled:
		case tok.syncErr != nil:
			// Never settled in this process, however often it is sent: see classify.
			fail(i, "fsync", s.opts.Path, tok.syncErr)
		default:
			tok.settled = true
			done = append(done, tok.line)
		}
	}
	s.markSettled(done)

	if err := s.saveCheckpoint(); err != nil {
		// The settlements hold in memory, and any later save (the next batch, an idle followed
		// file, Close) writes them; a resend only tries the save again.
		for i, tok := range toks {
			if !failed[i] && tok != nil {
				fail(i, "checkpoint", s.opts.Checkpoint, err)
			}
		}
	}
	return se.Err()
}

// Requeue appends runtime copies that came due, each under its own key. When the append fails
// part way, the error is an engine.SettleError naming (by index into msgs) the copies that were
// not written whole, so that only those are sent again.
func (s *Source) Requeue(ctx context.Context, msgs []*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	n, err := s.appendRecords(msgs)
	if err == nil {
		return nil
	}
	var se engine.SettleError
	reason, permanent := classify(err)
	for i := n; i < len(msgs); i++ {
		se.Add(engine.Fault{Index: i, Command: "append", Key: s.opts.Path, Reason: reason, Permanent: permanent, Err: err})
	}
	return se.Err()
}

// appendRecords appends msgs to the stream file in one write and returns how many of them were
// written whole. It holds the process's append lock of the path (codec.WithAppendLock), which
// record emits to the same file share, so lines never interleave. When the file does not end
// with a newline (a last line written without one, or a copy cut short by a failed write), a
// newline goes first: a torn line stays a malformed line of its own and never joins a record.
func (s *Source) appendRecords(msgs []*engine.Message) (int, error) {
	s.appMu.Lock()
	defer s.appMu.Unlock()
	if s.app == nil {
		// Opened on first use, so that a read-only file replays as long as nothing is written.
		// Never created: a stream file that is gone is an error, not a new empty file.
		f, err := os.OpenFile(s.opts.Path, os.O_RDWR|os.O_APPEND, 0)
		if err != nil {
			return 0, fmt.Errorf("file: open %s for appending: %w", s.opts.Path, err)
		}
		s.app = f
	}
	var (
		n   int
		err error
	)
	codec.WithAppendLock(s.opts.Path, func() { n, err = s.appendLocked(msgs) })
	return n, err
}

func (s *Source) appendLocked(msgs []*engine.Message) (int, error) {
	st, err := s.app.Stat()
	if err != nil {
		return 0, fmt.Errorf("file: stat %s: %w", s.opts.Path, err)
	}
	buf := s.appBuf[:0]
	if size := st.Size(); size > 0 {
		var last [1]byte
		if _, err := s.app.ReadAt(last[:], size-1); err != nil {
			return 0, fmt.Errorf("file: read %s: %w", s.opts.Path, err)
		}
		if last[0] != '\n' {
			buf = append(buf, '\n')
		}
	}
	ends := s.appEnds[:0] // ends[j]: bytes of buf up to and including record j
	for _, m := range msgs {
		buf = codec.AppendRecord(buf, m)
		ends = append(ends, len(buf))
	}
	written, err := appendWrite(s.app, buf)
	if cap(buf) <= 1<<20 {
		s.appBuf, s.appEnds = buf, ends
	}
	if err == nil {
		return len(msgs), nil
	}
	whole := sort.SearchInts(ends, written+1) // records that ended within what was written
	return whole, fmt.Errorf("file: append %s: %w", s.opts.Path, err)
}

// syncAppender flushes the appended copies to stable storage.
func (s *Source) syncAppender() error {
	s.appMu.Lock()
	defer s.appMu.Unlock()
	if s.app == nil {
		return nil
	}
	if err := appendSync(s.app); err != nil {
		return fmt.Errorf("file: fsync %s: %w", s.opts.Path, err)
	}
	return nil
}

// errFsync marks a failed fsync, which classify always takes as permanent.
type errFsync struct{ err error }

func (e errFsync) Error() string { return e.err.Error() }
func (e errFsync) Unwrap() error { return e.err }

// classify turns a file error into a fault reason and says whether it is permanent (see
// Settle): a failed fsync always is; anything else as for every record output
// (codec.ClassifyWrite).
func classify(err error) (reason string, permanent bool) {
	if fe := (errFsync{}); errors.As(err, &fe) {
		return "fsync", true
	}
	return codec.ClassifyWrite(err)
}

// markSettled records final settlements and drops the settled prefix of pending.
func (s *Source) markSettled(lines []int64) {
	if len(lines) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending[s.head:]
	for _, n := range lines {
		i := sort.Search(len(p), func(i int) bool { return p[i].line >= n })
		if i < len(p) && p[i].line == n {
			p[i].settled = true
		}
	}
	for s.head < len(s.pending) && s.pending[s.head].settled {
		s.head++
	}
	switch {
	case s.head == len(s.pending):
		s.pending, s.head = s.pending[:0], 0
	case s.head > 1024 && s.head*2 > len(s.pending):
		s.pending = s.pending[:copy(s.pending, s.pending[s.head:])]
		s.head = 0
	}
}

// checkpointLocked computes the resume position; s.mu must be held.
func (s *Source) checkpointLocked() checkpoint {
	cp := checkpoint{Offset: s.frontier.off, Line: s.frontier.line}
	if s.head < len(s.pending) {
		first := s.pending[s.head] // unsettled: markSettled drops settled heads
		cp.Offset, cp.Line = first.start, first.line-1
		inRun := false
		for _, e := range s.pending[s.head+1:] {
			switch {
			case !e.settled:
				inRun = false
			case inRun:
				cp.Settled[len(cp.Settled)-1][1] = e.line
			default:
				cp.Settled = append(cp.Settled, lineRange{e.line, e.line})
				inRun = true
			}
		}
	}
	for _, r := range s.carried { // settled in an earlier run, not read yet in this one
		if r[1] <= s.frontier.line {
			continue
		}
		r[0] = max(r[0], s.frontier.line+1)
		cp.Settled = append(cp.Settled, r)
	}
	return cp
}

// saveCheckpoint writes the checkpoint when it moved.
func (s *Source) saveCheckpoint() error {
	if s.opts.Checkpoint == "" {
		return nil
	}
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	s.mu.Lock()
	cp := s.checkpointLocked()
	s.mu.Unlock()
	if cp.equal(s.written) {
		return nil
	}
	data, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("file: checkpoint: %w", err)
	}
	if err := writeCheckpoint(s.opts.Checkpoint, append(data, '\n')); err != nil {
		return fmt.Errorf("file: checkpoint: %w", err)
	}
	s.written = cp
	return nil
}

// flushIdle saves the checkpoint while a followed file is idle, so skipped lines move it too.
// A failure is logged once, not on every poll.
func (s *Source) flushIdle() {
	err := s.saveCheckpoint()
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	switch {
	case err != nil && !s.cpFailing:
		s.log.Warn().Err(err).Msg("checkpoint not saved")
	case err == nil && s.cpFailing:
		s.log.Info().Msg("checkpoint saved again")
	}
	s.cpFailing = err != nil
}

// writeFileAtomic replaces path with data: a reader, or a crash, sees the old content or the
// new one, never a mix.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		os.Remove(name)
		return err
	}
	// Make the rename itself durable. Some filesystems cannot sync a folder; the rename is
	// still atomic there, so that is not an error.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

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
