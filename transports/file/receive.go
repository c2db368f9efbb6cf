package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

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
