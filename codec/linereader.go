package codec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// MaxLineSize is the longest record line readers accept; a longer line is skipped as malformed.
const MaxLineSize = 16 << 20

// ErrLineTooLong is returned by LineReader.Next for a line longer than its limit; the line has
// been consumed.
var ErrLineTooLong = fmt.Errorf("%w: line longer than the limit", ErrMalformed)

// LineReader reads newline-terminated lines from a reader that may grow (a followed file):
// at io.EOF the bytes of an unfinished line are kept, and the next call continues it.
type LineReader struct {
	r       *bufio.Reader
	max     int
	buf     []byte // the unfinished line, when it spans buffer fills or an EOF
	size    int    // bytes consumed of the unfinished line (more than len(buf) when too long)
	tooLong bool
}

// NewLineReader returns a LineReader; max <= 0 means MaxLineSize.
func NewLineReader(r io.Reader, max int) *LineReader {
	if max <= 0 {
		max = MaxLineSize
	}
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next complete line without its '\n', and the number of bytes it took in the
// input (the newline included). The line is valid until the next call. At the end of the input
// it returns io.EOF and keeps any unfinished line (see Pending); other read errors are returned
// as they are. An over-long line is returned as ErrLineTooLong with its size.
func (lr *LineReader) Next() (line []byte, size int, err error) {
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if err == nil && lr.size == 0 && len(chunk) <= lr.max+1 {
			return chunk[:len(chunk)-1], len(chunk), nil
		}
		lr.size += len(chunk)
		if !lr.tooLong {
			if len(lr.buf)+len(chunk) > lr.max+1 { // +1: the newline does not count
				lr.tooLong = true
				lr.buf = lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			line, size, err := lr.take()
			return line[:max(len(line)-1, 0)], size, err
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, 0, err
		}
	}
}

// Pending reports the number of bytes of an unfinished line held after io.EOF.
func (lr *LineReader) Pending() int { return lr.size }

// TakePending returns the unfinished line held after io.EOF as a final line (for an input that
// ended without a newline), with its size, or ErrLineTooLong.
func (lr *LineReader) TakePending() (line []byte, size int, err error) { return lr.take() }

func (lr *LineReader) take() ([]byte, int, error) {
	line, size, tooLong := lr.buf, lr.size, lr.tooLong
	lr.buf, lr.size, lr.tooLong = lr.buf[:0], 0, false
	if cap(lr.buf) > 1<<20 {
		lr.buf = nil // do not keep one huge line's buffer for the rest of the run
	}
	if tooLong {
		return nil, size, ErrLineTooLong
	}
	return line, size, nil
}
