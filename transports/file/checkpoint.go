package file

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

type checkpoint struct {
	Offset  int64       `json:"offset"`
	Line    int64       `json:"line"`
	Settled []lineRange `json:"settled,omitempty"`
}

func (c checkpoint) equal(d checkpoint) bool {
	return c.Offset == d.Offset && c.Line == d.Line && slices.Equal(c.Settled, d.Settled)
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
