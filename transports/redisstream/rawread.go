package redisstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// rawRead is the source's read connection once go-redis has dialled it and run its handshake
// (TLS aside, AUTH or HELLO, SELECT, CLIENT SETNAME, a Sentinel's master lookup): XREADGROUP,
// and reclaim's XAUTOCLAIM with its XPENDING, are written on it directly and the RESP2 replies
// parsed straight into deliveries. go-redis's generic reply built a []any for every entry and
// for its field list and boxed every string (12 allocations an entry, 3 here: `go test -run
// '^$' -bench ReadParse ./transports/redisstream/`), on the one path every batch waits for.
//
// Only for plain TCP and unix connections: go-redis checks those for health before it reuses
// them, so a connection given up on here mid-reply (closed here) is found closed there and
// dialled anew, never read from in the middle of a reply.
type rawRead struct {
	nc   net.Conn
	br   *bufio.Reader
	wbuf []byte
	// go-redis's timeouts, as its options hold them once set up: > 0 a deadline that far
	// ahead, 0 none, < 0 deadlines left alone.
	readTimeout, writeTimeout time.Duration
	broken                    bool // a read or write failed: closed, not to be used again
	// most is the most entries the reply being read may hold (the COUNT asked for): a reply
	// that claims more is not believed, and nothing is allocated for it.
	most int
}

// newRawRead returns nc's raw reader, or nil where go-redis could not tell the connection
// closed (no syscall.Conn: TLS): reads then stay with go-redis.
func newRawRead(nc net.Conn, readTimeout, writeTimeout time.Duration) *rawRead {
	if _, ok := nc.(syscall.Conn); !ok {
		return nil
	}
	return &rawRead{nc: nc, br: bufio.NewReaderSize(nc, 32<<10), readTimeout: readTimeout, writeTimeout: writeTimeout}
}

// errProtocol is a reply this reader cannot make sense of; the connection is given up.
var errProtocol = errors.New("unexpected reply")

// respError is an error reply, as go-redis reports one: the connection stays usable.
type respError string

func (e respError) Error() string { return string(e) }
func (respError) RedisError()     {}

// readGroup sends XREADGROUP for the source and parses its reply; block < 0 does not block.
func (r *rawRead) readGroup(ctx context.Context, s *Source, id string, count int, block time.Duration) ([]*engine.Delivery, []string, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	args := [12]string{"XREADGROUP", "GROUP", s.o.Group, s.o.Consumer, "COUNT", strconv.Itoa(count)}
	n := 6
	if block >= 0 {
		args[n], args[n+1] = "BLOCK", strconv.FormatInt(block.Milliseconds(), 10)
		n += 2
	}
	args[n], args[n+1], args[n+2] = "STREAMS", s.o.Stream, id
	n += 3
	if err := r.send(max(block, 0), args[:n]); err != nil {
		return nil, nil, err
	}
	r.most = count
	ds, gone, err := r.streamReply(s)
	r.keepIf(err)
	return ds, gone, err
}

// autoClaim sends XAUTOCLAIM from cursor and, with pending > 0, the XPENDING of up to that many
// of this consumer's entries from the cursor on that learns the claimed entries' delivery
// counts, in one round trip, as reader.autoClaim does through go-redis. known is nil where
// that XPENDING failed (its counts are then asked for again); an XAUTOCLAIM that failed fails
// the pass.
func (r *rawRead) autoClaim(ctx context.Context, s *Source, cursor string, count, pending int) (next string, ds []*engine.Delivery, gone []string, known []redis.XPendingExt, err error) {
	if err := ctx.Err(); err != nil {
		return "", nil, nil, nil, err
	}
	cmds := [2][]string{{"XAUTOCLAIM", s.o.Stream, s.o.Group, s.o.Consumer,
		strconv.FormatInt(s.o.MinIdle.Milliseconds(), 10), cursor, "COUNT", strconv.Itoa(count)}}
	n := 1
	if pending > 0 {
		cmds[1] = []string{"XPENDING", s.o.Stream, s.o.Group, cursor, "+", strconv.Itoa(pending), s.o.Consumer}
		n++
	}
	if err := r.send(0, cmds[:n]...); err != nil {
		return "", nil, nil, nil, err
	}
	r.most = count
	next, ds, gone, err = r.autoClaimReply(s)
	r.keepIf(err)
	if r.broken || pending == 0 {
		return next, ds, gone, nil, err
	}
	r.most = pending
	known, perr := r.pendingReply()
	r.keepIf(perr)
	if perr != nil {
		known = nil
	}
	return next, ds, gone, known, err
}

// send writes the commands in one write (a pipeline) and sets the deadline for their replies:
// the read timeout, plus block for a read that may wait that long for entries (as go-redis
// allows for its own XREADGROUP).
func (r *rawRead) send(block time.Duration, cmds ...[]string) error {
	if r.broken {
		return net.ErrClosed
	}
	w := r.wbuf[:0]
	for _, args := range cmds {
		w = append(w, '*')
		w = strconv.AppendInt(w, int64(len(args)), 10)
		w = append(w, '\r', '\n')
		for _, a := range args {
			w = append(w, '$')
			w = strconv.AppendInt(w, int64(len(a)), 10)
			w = append(w, '\r', '\n')
			w = append(w, a...)
			w = append(w, '\r', '\n')
		}
	}
	r.wbuf = w
	err := deadline(r.nc.SetWriteDeadline, r.writeTimeout)
	if err == nil {
		_, err = r.nc.Write(w)
	}
	if err == nil {
		rt := r.readTimeout
		if rt > 0 {
			rt += block
		}
		err = deadline(r.nc.SetReadDeadline, rt)
	}
	if err != nil {
		r.close()
	}
	return err
}

// keepIf gives the connection up after a failed read, unless the failure was an error reply
// (read whole: the connection is where it should be).
func (r *rawRead) keepIf(err error) {
	var re respError
	if err != nil && !errors.As(err, &re) {
		r.close()
	}
}

func deadline(set func(time.Time) error, timeout time.Duration) error {
	switch {
	case timeout > 0:
		return set(time.Now().Add(timeout))
	case timeout == 0:
		return set(time.Time{})
	}
	return nil
}

// close gives the connection up: a reply may be half read, or still on its way.
func (r *rawRead) close() {
	if !r.broken {
		r.broken = true
		r.nc.Close()
	}
}

// streamReply parses an XREADGROUP reply of one stream: a null array (nothing new), or
// [[stream, [[id, [field, value, …]] …]]]; an entry whose data is gone has a null field list.
func (r *rawRead) streamReply(s *Source) ([]*engine.Delivery, []string, error) {
	n, err := r.arrayLen()
	if err != nil || n <= 0 {
		return nil, nil, err
	}
	if n != 1 {
		return nil, nil, fmt.Errorf("%w: %d streams", errProtocol, n)
	}
	if n, err = r.arrayLen(); err != nil {
		return nil, nil, err
	}
	if n != 2 {
		return nil, nil, fmt.Errorf("%w: stream of %d elements", errProtocol, n)
	}
	if _, err := r.bulk(); err != nil { // the stream's name
		return nil, nil, err
	}
	if n, err = r.arrayLen(); err != nil || n <= 0 {
		return nil, nil, err
	}
	return r.entries(s, n)
}

// autoClaimReply parses an XAUTOCLAIM reply: [next cursor, entries, deleted ids] (the third
// from Redis 7 on; before, an entry whose data is gone comes with a null field list).
func (r *rawRead) autoClaimReply(s *Source) (next string, ds []*engine.Delivery, gone []string, err error) {
	n, err := r.arrayLen()
	if err != nil {
		return "", nil, nil, err
	}
	if n != 2 && n != 3 {
		return "", nil, nil, fmt.Errorf("%w: xautoclaim reply of %d elements", errProtocol, n)
	}
	b, err := r.bulk()
	if err != nil {
		return "", nil, nil, err
	}
	next = string(b)
	m, err := r.arrayLen()
	if err != nil {
		return "", nil, nil, err
	}
	if m > 0 {
		if ds, gone, err = r.entries(s, m); err != nil {
			return "", nil, nil, err
		}
	}
	if n == 3 {
		m, err := r.arrayLen()
		if err != nil {
			return "", nil, nil, err
		}
		for range max(m, 0) {
			b, err := r.bulk()
			if err != nil {
				return "", nil, nil, err
			}
			gone = append(gone, string(b))
		}
	}
	return next, ds, gone, nil
}

// pendingReply parses the reply of an extended XPENDING (id, consumer, idle ms, delivery count
// per entry) into ids and counts.
func (r *rawRead) pendingReply() ([]redis.XPendingExt, error) {
	n, err := r.arrayLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	if n > r.most {
		return nil, fmt.Errorf("%w: %d pending entries where at most %d were asked for", errProtocol, n, r.most)
	}
	out := make([]redis.XPendingExt, n)
	for i := range out {
		if m, err := r.arrayLen(); err != nil {
			return nil, err
		} else if m != 4 {
			return nil, fmt.Errorf("%w: xpending entry of %d elements", errProtocol, m)
		}
		b, err := r.bulk()
		if err != nil {
			return nil, err
		}
		out[i].ID = string(b)
		if _, err := r.bulk(); err != nil { // the consumer: this one
			return nil, err
		}
		idle, err := r.header(':')
		if err != nil {
			return nil, err
		}
		count, err := r.header(':')
		if err != nil {
			return nil, err
		}
		out[i].Idle, out[i].RetryCount = time.Duration(idle)*time.Millisecond, int64(count)
	}
	return out, nil
}

// entries parses n stream entries ([id, [field, value, …]] each) into deliveries; an entry
// whose data is gone (a null field list) is left out and its id returned in gone.
func (r *rawRead) entries(s *Source, n int) ([]*engine.Delivery, []string, error) {
	if n > r.most {
		return nil, nil, fmt.Errorf("%w: %d entries where at most %d were asked for", errProtocol, n, r.most)
	}
	all := make([]engine.Delivery, n)
	ds := make([]*engine.Delivery, 0, n)
	var gone []string
	extra := s.headerRoom()
	var none sharedNone
	for i := range all {
		if m, err := r.arrayLen(); err != nil {
			return nil, nil, err
		} else if m != 2 {
			return nil, nil, fmt.Errorf("%w: entry of %d elements", errProtocol, m)
		}
		b, err := r.bulk()
		if err != nil {
			return nil, nil, err
		}
		id := string(b) // before the next read reuses the buffer
		nf, err := r.arrayLen()
		if err != nil {
			return nil, nil, err
		}
		if nf < 0 {
			gone = append(gone, id)
			continue
		}
		d := &all[i]
		d.Key, d.ID, d.Token = s.o.Stream, id, id
		for j := 0; j < nf/2; j++ {
			k, err := r.bulk()
			if err != nil {
				return nil, nil, err
			}
			if string(k) == codec.StreamPayloadField {
				if d.Payload, err = r.bulkCopy(); err != nil {
					return nil, nil, err
				}
				continue
			}
			name := string(k)
			v, err := r.bulk()
			if err != nil {
				return nil, nil, err
			}
			if d.Headers == nil {
				d.Headers = make(map[string]string, min(nf/2, 64)+extra)
			}
			d.Headers[name] = string(v) // a repeated field keeps its last value, as in go-redis's map
		}
		if nf%2 != 0 {
			return nil, nil, fmt.Errorf("%w: odd field list", errProtocol)
		}
		none.fill(&d.Message)
		ds = append(ds, d)
	}
	return ds, gone, nil
}

// line reads one reply line without its CRLF; the slice is valid until the next read.
func (r *rawRead) line() ([]byte, error) {
	l, err := r.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line over %d bytes", errProtocol, r.br.Size())
		}
		return nil, err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: %q", errProtocol, l)
	}
	return l[:len(l)-2], nil
}

// header reads a line that must start with kind and returns its number; an error reply is
// returned as a respError.
func (r *rawRead) header(kind byte) (int, error) {
	l, err := r.line()
	if err != nil {
		return 0, err
	}
	switch l[0] {
	case kind:
	case '-':
		return 0, respError(string(l[1:]))
	default:
		return 0, fmt.Errorf("%w: %q where %q was due", errProtocol, l, kind)
	}
	if len(l) < 2 {
		return 0, fmt.Errorf("%w: %q", errProtocol, l)
	}
	n, err := strconv.Atoi(unsafe.String(&l[1], len(l)-1))
	if err != nil || n < -1 {
		return 0, fmt.Errorf("%w: %q", errProtocol, l)
	}
	return n, nil
}

// arrayLen reads an array's length (-1: a null array).
func (r *rawRead) arrayLen() (int, error) { return r.header('*') }

// bulk reads a bulk string into a slice valid until the next read.
func (r *rawRead) bulk() ([]byte, error) {
	n, err := r.bulkLen()
	if err != nil || n+2 > r.br.Size() {
		return r.readFull(n, err)
	}
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

// bulkCopy reads a bulk string into a slice of its own.
func (r *rawRead) bulkCopy() ([]byte, error) { return r.readFull(r.bulkLen()) }

// bulkLen reads a bulk string's length, which must not be null.
func (r *rawRead) bulkLen() (int, error) {
	n, err := r.header('$')
	if err == nil && n < 0 {
		err = fmt.Errorf("%w: null string", errProtocol)
	}
	return n, err
}

// ended checks that b, a bulk string of n bytes and what follows it, has its CRLF.
func ended(b []byte, n int) error {
	if b[n] != '\r' || b[n+1] != '\n' {
		return fmt.Errorf("%w: string not ended by CRLF", errProtocol)
	}
	return nil
}

func (r *rawRead) readFull(n int, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
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
