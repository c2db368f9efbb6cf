package redisstream

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/resp"
)

// rawRead is the source's read connection once go-redis has dialled it and run its handshake
// (TLS aside, AUTH or HELLO, SELECT, CLIENT SETNAME, a Sentinel's master lookup): XREADGROUP,
// and reclaim's XAUTOCLAIM with its XPENDING, are written on it directly and the RESP2 replies
// (read by internal/resp) turned straight into deliveries. go-redis's generic reply built a []any for every entry and
// for its field list and boxed every string (12 allocations an entry, 3 here: `go test -run
// '^$' -bench ReadParse ./transports/redisstream/`), on the one path every batch waits for.
//
// Only for plain TCP and unix connections: go-redis checks those for health before it reuses
// them, so a connection given up on here mid-reply (closed here) is found closed there and
// dialled anew, never read from in the middle of a reply.
type rawRead struct {
	nc   net.Conn
	rd   *resp.Reader
	wbuf []byte
	// go-redis's timeouts, as its options hold them once set up: > 0 a deadline that far
	// ahead, 0 none, < 0 deadlines left alone.
	readTimeout, writeTimeout time.Duration
	// broken: a read or write failed, the connection is closed and not to be used again. Atomic:
	// claiming passes read their replies in a goroutine while the next pass is written.
	broken atomic.Bool
	// noWrites: a claiming pass's write failed while the passes before it still read their
	// replies, which Redis sends all the same: nothing more is written, and the failed pass
	// closes the connection once those before it are read (readPass).
	noWrites atomic.Bool
	// claim holds the last XCLAIM's arguments, written here before the next is built (sendClaim).
	claim []string
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
	return &rawRead{nc: nc, rd: resp.NewReader(nc, 32<<10), readTimeout: readTimeout, writeTimeout: writeTimeout}
}

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
	if r.broken.Load() || pending == 0 {
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

// sendClaim writes a claiming pass's XCLAIM of ids and, with listCount > 0, the XPENDING of up to
// listCount entries idle for min_idle after listFrom, as runPass sends them through go-redis.
// Their replies are read with claimReplies, in the order the passes were sent: Redis answers
// the next pass's commands while this process parses the last one's.
func (r *rawRead) sendClaim(ctx context.Context, s *Source, ids []string, listFrom string, listCount int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	minIdle := strconv.FormatInt(s.o.MinIdle.Milliseconds(), 10)
	claim := append(r.claim[:0], "XCLAIM", s.o.Stream, s.o.Group, s.o.Consumer, minIdle)
	claim = append(claim, ids...)
	r.claim = claim
	cmds := [][]string{claim}
	if listCount > 0 {
		cmds = append(cmds, []string{"XPENDING", s.o.Stream, s.o.Group, "IDLE", minIdle,
			listFrom, "+", strconv.Itoa(listCount)})
	}
	err := r.write(0, cmds...)
	if err != nil {
		r.noWrites.Store(true) // closed by this pass's readPass, after the passes before it
	}
	return err
}

// claimReplies reads the replies sendClaim asked for: the entries claimed (at most count) and
// the ids among them whose data is gone, then, with listCount > 0, the entries listed (nil with
// listErr set where that XPENDING failed). An XCLAIM that failed fails the pass; its XPENDING's
// reply is read all the same, so the connection stays in step.
func (r *rawRead) claimReplies(s *Source, count, listCount int) (ds []*engine.Delivery, gone []string, listed []candidate, listErr, err error) {
	if r.broken.Load() {
		return nil, nil, nil, net.ErrClosed, net.ErrClosed
	}
	r.most = count
	n, err := r.rd.ClaimReply(count)
	if err == nil && n > 0 {
		ds, gone, err = r.entries(s, n)
	}
	r.keepIf(err)
	if listCount == 0 {
		return ds, gone, nil, nil, err
	}
	if r.broken.Load() {
		return ds, gone, nil, net.ErrClosed, err
	}
	r.most = listCount
	listed, listErr = r.idleReply()
	r.keepIf(listErr)
	return ds, gone, listed, listErr, err
}

// send writes the commands in one write (a pipeline) and sets the deadline for their replies:
// the read timeout, plus block for a read that may wait that long for entries (as go-redis
// allows for its own XREADGROUP).
func (r *rawRead) send(block time.Duration, cmds ...[]string) error {
	err := r.write(block, cmds...)
	if err != nil {
		r.close()
	}
	return err
}

// write is send without giving the connection up on a failure.
func (r *rawRead) write(block time.Duration, cmds ...[]string) error {
	if r.broken.Load() || r.noWrites.Load() {
		return net.ErrClosed
	}
	w := r.wbuf[:0]
	for _, args := range cmds {
		w = resp.AppendCommand(w, args...)
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
	return err
}

// keepIf gives the connection up after a failed read, unless the failure was an error reply
// (read whole: the connection is where it should be).
func (r *rawRead) keepIf(err error) {
	var re resp.Error
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
	if r.broken.CompareAndSwap(false, true) {
		r.nc.Close()
	}
}

// streamReply reads an XREADGROUP reply of one stream into deliveries; an entry whose data is
// gone (a null field list) is left out and its id returned in gone.
func (r *rawRead) streamReply(s *Source) ([]*engine.Delivery, []string, error) {
	n, err := r.rd.StreamReply(r.most)
	if err != nil || n == 0 {
		return nil, nil, err
	}
	return r.entries(s, n)
}

// autoClaimReply reads an XAUTOCLAIM reply: the next cursor, the claimed entries, and the ids
// whose data is gone (listed apart from Redis 7 on, as null field lists before).
func (r *rawRead) autoClaimReply(s *Source) (next string, ds []*engine.Delivery, gone []string, err error) {
	next, n, deleted, err := r.rd.AutoClaimReply(r.most)
	if err != nil {
		return "", nil, nil, err
	}
	if n > 0 {
		if ds, gone, err = r.entries(s, n); err != nil {
			return "", nil, nil, err
		}
	}
	if deleted {
		ids, err := r.rd.Deleted()
		if err != nil {
			return "", nil, nil, err
		}
		gone = append(gone, ids...)
	}
	return next, ds, gone, nil
}

// pendingReply reads the reply of an extended XPENDING into ids and counts.
func (r *rawRead) pendingReply() ([]redis.XPendingExt, error) {
	var out []redis.XPendingExt
	err := r.pendingEntries(func(n int) { out = make([]redis.XPendingExt, n) },
		func(i int, id string, idle time.Duration, count int64) {
			out[i] = redis.XPendingExt{ID: id, Idle: idle, RetryCount: count}
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// idleReply reads the reply of a claiming pass's XPENDING into candidates, as pendingReply does.
func (r *rawRead) idleReply() ([]candidate, error) {
	var out []candidate
	err := r.pendingEntries(func(n int) { out = make([]candidate, n) },
		func(i int, id string, idle time.Duration, count int64) {
			out[i] = candidate{ID: id, count: count, idle: idle.Milliseconds()}
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pendingEntries reads an extended XPENDING reply of up to r.most entries: alloc is told how
// many there are (not called for none), then set each entry's id (its own string) and counts.
func (r *rawRead) pendingEntries(alloc func(n int), set func(i int, id string, idle time.Duration, count int64)) error {
	n, err := r.rd.PendingReply(r.most)
	if err != nil || n == 0 {
		return err
	}
	alloc(n)
	var blk byteBlock // the ids, as entries does
	for i := range n {
		id, err := r.rd.PendingID()
		if err != nil {
			return err
		}
		sid := blk.string(id) // before the next read reuses the buffer
		idle, count, err := r.rd.PendingCounts()
		if err != nil {
			return err
		}
		set(i, sid, idle, count)
	}
	return nil
}

// entries reads n stream entries into deliveries, allocated together; an entry whose data is
// gone is left out and its id returned in gone.
func (r *rawRead) entries(s *Source, n int) ([]*engine.Delivery, []string, error) {
	all := make([]engine.Delivery, n)
	toks := make(tokens, n)
	ds := make([]*engine.Delivery, 0, n)
	var gone []string
	extra := s.headerRoom()
	var none sharedNone
	var blk byteBlock
	for i := range all {
		idb, err := r.rd.EntryID()
		if err != nil {
			return nil, nil, err
		}
		id := blk.string(idb) // before the next read reuses the buffer
		pairs, err := r.rd.EntryFields()
		if err != nil {
			return nil, nil, err
		}
		if pairs < 0 {
			gone = append(gone, id)
			continue
		}
		d := &all[i]
		d.Key, d.ID = s.o.Stream, id
		toks.set(d, i)
		for range pairs {
			k, err := r.rd.Bulk()
			if err != nil {
				return nil, nil, err
			}
			if string(k) == codec.StreamPayloadField {
				v, err := r.rd.Bulk()
				if err != nil {
					return nil, nil, err
				}
				d.Payload = blk.copy(v)
				continue
			}
			name := string(k) // before the next read reuses the buffer
			v, err := r.rd.Bulk()
			if err != nil {
				return nil, nil, err
			}
			if d.Headers == nil {
				d.Headers = make(map[string]string, min(pairs, 64)+extra)
			}
			d.Headers[name] = string(v) // a repeated field keeps its last value, as in go-redis's map
		}
		none.fill(&d.Message)
		ds = append(ds, d)
	}
	return ds, gone, nil
}

// byteBlock copies the short strings of one reply (ids, payloads) into shared blocks: two
// allocations an entry fewer on the reader's path. A block lives as long as any delivery of
// its reply that holds a piece of it, so it is kept small, and a long string gets its own.
type byteBlock struct{ b []byte }

const (
	byteBlockSize = 8 << 10
	byteBlockMost = 512 // longer strings are copied on their own
)

// copy returns a copy of p, capped at its length: an append to it never writes into the next.
func (k *byteBlock) copy(p []byte) []byte {
	if len(p) > byteBlockMost || len(p) == 0 {
		return bytes.Clone(p)
	}
	if cap(k.b)-len(k.b) < len(p) {
		k.b = make([]byte, 0, byteBlockSize)
	}
	n := len(k.b)
	k.b = append(k.b, p...)
	return k.b[n:len(k.b):len(k.b)]
}

// string returns p as a string; the block's bytes are never written again.
func (k *byteBlock) string(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	c := k.copy(p)
	return unsafe.String(unsafe.SliceData(c), len(c))
}
