// Package resp reads the RESP2 replies of the Redis stream commands flowrun sends on a bare
// connection (XREADGROUP, XAUTOCLAIM, extended XPENDING) and writes their requests. It is the
// grammar only: what the replies become (engine deliveries) is the stream transport's.
//
// It reads a reply as it comes, with no value built for what the caller does not keep: go-redis's
// generic reply builds a []any for every entry and boxes every string. Where it accepts a reply,
// go-redis accepts it too and reads the same values (FuzzAgainstGoRedis); it is stricter than
// go-redis where Redis never sends what go-redis tolerates (RESP3 types, a bulk string not ended
// by CRLF, a null where a value is due, more entries than were asked for).
package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unsafe"
)

// ErrProtocol is a reply this reader cannot make sense of: the connection is to be given up.
var ErrProtocol = errors.New("unexpected reply")

// Error is an error reply, as go-redis reports one (redis.Error): read whole, so the connection
// stays usable.
type Error string

func (e Error) Error() string { return string(e) }

// RedisError marks Error as go-redis's redis.Error.
func (Error) RedisError() {}

// Reader reads replies from a buffered stream.
type Reader struct {
	br *bufio.Reader
	// view is what br had buffered when quick last looked, of which the first used bytes are
	// read already but not yet discarded from br: the elements read the quick way cost no
	// call into bufio each. Whatever reads br itself calls sync first.
	view []byte
	used int
}

// NewReader reads from rd through a buffer of size bytes: the longest line it reads, and the
// longest bulk string it returns without a copy of its own.
func NewReader(rd io.Reader, size int) *Reader {
	return &Reader{br: bufio.NewReaderSize(rd, size)}
}

// AppendCommand appends args as a RESP request (an array of bulk strings) to b.
func AppendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// sync discards from br what quick has read, before br is read itself.
func (r *Reader) sync() {
	if r.used > 0 {
		r.br.Discard(r.used)
	}
	r.view, r.used = nil, 0
}

// line reads one reply line without its CRLF; the slice is valid until the next read.
func (r *Reader) line() ([]byte, error) {
	r.sync()
	l, err := r.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line over %d bytes", ErrProtocol, r.br.Size())
		}
		return nil, err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: %q", ErrProtocol, l)
	}
	return l[:len(l)-2], nil
}

// header reads a line that must start with kind and returns its number (-1 is a null); an error
// reply is returned as an Error.
func (r *Reader) header(kind byte) (int, error) {
	if n, h, _ := r.quick(kind); h > 0 {
		r.used += h
		return n, nil
	}
	l, err := r.line()
	if err != nil {
		return 0, err
	}
	switch l[0] {
	case kind:
	case '-':
		return 0, Error(string(l[1:]))
	default:
		return 0, fmt.Errorf("%w: %q where %q was due", ErrProtocol, l, kind)
	}
	if len(l) < 2 {
		return 0, fmt.Errorf("%w: %q", ErrProtocol, l)
	}
	n, err := strconv.Atoi(unsafe.String(&l[1], len(l)-1))
	if err != nil || n < -1 && kind != ':' {
		return 0, fmt.Errorf("%w: %q", ErrProtocol, l)
	}
	return n, nil
}

// ArrayLen reads an array's length; -1 is a null array.
func (r *Reader) ArrayLen() (int, error) { return r.header('*') }

// quickMost is the longest number quick reads: nine digits, which never overflow an int.
const quickMost = 9

// quick reads, without consuming it, a header line of kind already in the buffer whose number is
// plain digits (no sign, at most quickMost), as header would read it: the number, the line's
// length with its CRLF, and the buffered bytes it starts. h is 0 for anything else (a null, an
// error reply, a line not yet buffered, a malformed one), which header then reads the long way,
// with its errors. Each reply's elements start with such a line: this skips ReadSlice's search,
// strconv's call and, while the view lasts, bufio's Peek and Discard.
func (r *Reader) quick(kind byte) (n, h int, b []byte) {
	if r.used+4 > len(r.view) {
		// At the view's end, or none since br was read: look at what br holds now.
		r.sync()
		r.view, _ = r.br.Peek(r.br.Buffered()) // buffered bytes: never reads
	}
	b = r.view[r.used:]
	if len(b) < 4 || b[0] != kind {
		return 0, 0, nil
	}
	for i := 1; i < len(b) && i <= quickMost+1; i++ {
		c := b[i]
		switch {
		case '0' <= c && c <= '9':
			n = n*10 + int(c-'0')
		case c == '\r' && i > 1 && i+1 < len(b) && b[i+1] == '\n':
			return n, i + 2, b
		default:
			return 0, 0, nil
		}
	}
	return 0, 0, nil
}

// Array reads the length of an array that must not be null.
func (r *Reader) Array() (int, error) {
	n, err := r.ArrayLen()
	if err == nil && n < 0 {
		err = fmt.Errorf("%w: null array", ErrProtocol)
	}
	return n, err
}

// Int reads an integer reply.
func (r *Reader) Int() (int64, error) {
	n, err := r.header(':')
	return int64(n), err
}

// Bulk reads a bulk string, which must not be null, into a slice valid until the next read.
func (r *Reader) Bulk() ([]byte, error) {
	if n, h, b := r.quick('$'); h > 0 && len(b) >= h+n+2 && b[h+n] == '\r' && b[h+n+1] == '\n' {
		// Header and string both buffered (the usual case): one look at the buffer for both.
		r.used += h + n + 2
		return b[h : h+n], nil
	}
	n, err := r.bulkLen()
	if err != nil || n+2 > r.br.Size() {
		return r.readFull(n, err)
	}
	r.sync()
	b, err := r.br.Peek(n + 2)
	if err == nil {
		err = ended(b, n)
	}
	if err != nil {
		return nil, err
	}
	r.br.Discard(n + 2)
	return b[:n], nil
}

// String reads a bulk string into a string.
func (r *Reader) String() (string, error) {
	b, err := r.Bulk()
	return string(b), err
}

// BulkCopy reads a bulk string into a slice of its own.
func (r *Reader) BulkCopy() ([]byte, error) { return r.readFull(r.bulkLen()) }

// bulkLen reads a bulk string's length, which must not be null.
func (r *Reader) bulkLen() (int, error) {
	n, err := r.header('$')
	if err == nil && n < 0 {
		err = fmt.Errorf("%w: null string", ErrProtocol)
	}
	return n, err
}

// ended checks that b, a bulk string of n bytes and what follows it, has its CRLF.
func ended(b []byte, n int) error {
	if b[n] != '\r' || b[n+1] != '\n' {
		return fmt.Errorf("%w: string not ended by CRLF", ErrProtocol)
	}
	return nil
}

func (r *Reader) readFull(n int, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	r.sync()
	if n > 1<<20 {
		// Grown as the bytes come, so that a length no string has does not allocate it.
		var buf bytes.Buffer
		if _, err := io.CopyN(&buf, r.br, int64(n)+2); err != nil {
			return nil, err
		}
		b := buf.Bytes()
		if err := ended(b, n); err != nil {
			return nil, err
		}
		return b[:n:n], nil
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r.br, b); err != nil {
		return nil, err
	}
	if err := ended(b, n); err != nil {
		return nil, err
	}
	return b[:n:n], nil
}
