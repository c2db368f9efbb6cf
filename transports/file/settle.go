package file

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// The file operations Settle depends on, replaceable by tests to inject failures.
var (
	appendWrite     = (*os.File).Write
	appendSync      = (*os.File).Sync
	writeCheckpoint = writeFileAtomic
)

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
