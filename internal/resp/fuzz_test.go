package resp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// FuzzAgainstGoRedis feeds the same reply bytes to this package and to go-redis's own reply
// parser and compares what each makes of them, for the three replies the stream transport reads
// bare: XREADGROUP's, XAUTOCLAIM's and extended XPENDING's.
//
// go-redis's parser (internal/proto) cannot be imported, so the bytes reach it the way a reply
// does: a go-redis client whose Dialer returns one end of a net.Pipe, served by fakeServer,
// which refuses HELLO (go-redis then stays on RESP2, as for a server before Redis 6) and answers
// the command with the bytes. No redis-server here: a real one sends only well-formed replies,
// and the point is the malformed ones (TestRealRepliesAgainstGoRedis feeds both parsers the
// bytes of a real one's).
//
// Where this package accepts a reply, go-redis must accept it and read the same values; where
// this package reads an error reply, go-redis must report the same error. The other way round is
// not asked: this package refuses on purpose what Redis never sends and go-redis tolerates
// (RESP3 types, a bulk string not ended by CRLF, a null where a value is due, more entries than
// were asked for, lines longer than its buffer).
func FuzzAgainstGoRedis(f *testing.F) {
	for _, s := range seedReplies {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		checkAgainstGoRedis(t, reply)
	})
}

// seedReplies are replies of each shape, well-formed and not; `go test` runs them as a test.
var seedReplies = []string{
	"*-1\r\n",
	"*0\r\n",
	"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$7\r\npayload\r\n$1\r\nx\r\n",
	"*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-1\r\n*-1\r\n*2\r\n$3\r\n1-2\r\n*4\r\n$1\r\nk\r\n$1\r\na\r\n$1\r\nk\r\n$0\r\n\r\n",
	"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
	"*1\r\n*2\r\n$1\r\ns\r\n*-1\r\n",
	"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$-1\r\n",
	"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nk\r\n$5\r\nx\r\n",
	"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nk\r\n$1\r\nxyz",
	"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n+1-1\r\n*0\r\n",
	"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n-ERR in the middle\r\n",
	"-NOGROUP No such key 's' or consumer group 'g'\r\n",
	"-MOVED 3999 127.0.0.1:6381\r\n",
	"*3\r\n$3\r\n0-0\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*-1\r\n*1\r\n$3\r\n2-1\r\n",
	"*3\r\n$7\r\n12-3456\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$7\r\npayload\r\n$2\r\n{}\r\n*0\r\n",
	"*2\r\n$3\r\n0-0\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*-1\r\n",
	"*3\r\n$3\r\n0-0\r\n*0\r\n*-1\r\n",
	"*1\r\n*4\r\n$3\r\n1-1\r\n$1\r\na\r\n:1000\r\n:2\r\n",
	"*2\r\n*4\r\n$3\r\n1-1\r\n$1\r\na\r\n:0\r\n:1\r\n*4\r\n$3\r\n1-2\r\n$1\r\na\r\n:-1\r\n:+7\r\n",
	"*1\r\n*4\r\n$3\r\n1-1\r\n$1\r\na\r\n$4\r\n1000\r\n:2\r\n",
	"%1\r\n$1\r\ns\r\n*0\r\n",
	"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$7\r\npayload\r\n$999999999\r\nx",
	"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*999999998\r\n$1\r\nk\r\n",
	"*1\n",
	"",
}

// entry is a stream entry as either parser reads it: gone is a null field list (data deleted).
type entry struct {
	id     string
	gone   bool
	fields map[string]string
}

// parsed is what one parser made of a reply: its values, or its error.
type parsed struct {
	entries []entry
	next    string   // XAUTOCLAIM's cursor
	deleted []string // XAUTOCLAIM's deleted ids
	pending []pendingEntry
	err     error
}

type pendingEntry struct {
	id    string
	idle  time.Duration
	count int64
}

func (p parsed) String() string {
	if p.err != nil {
		return "error " + p.err.Error()
	}
	return fmt.Sprintf("entries %v next %q deleted %q pending %v", p.entries, p.next, p.deleted, p.pending)
}

func checkAgainstGoRedis(t *testing.T, reply string) {
	t.Helper()
	huge := claimsHugeLength(reply) // go-redis would allocate what the length claims
	for _, cmd := range []string{"xreadgroup", "xautoclaim", "xpending"} {
		ours := parseOurs(cmd, reply)
		if huge {
			continue
		}
		theirs := parseGoRedis(t, cmd, reply)
		var re Error
		switch {
		case ours.err == nil:
			if theirs.err != nil {
				t.Fatalf("%s %q: read here as %v, go-redis fails: %v", cmd, reply, ours, theirs.err)
			}
			if !equalParsed(ours, theirs) {
				t.Fatalf("%s %q: read here as\n\t%v\ngo-redis reads\n\t%v", cmd, reply, ours, theirs)
			}
		case errors.As(ours.err, &re):
			if !errors.As(theirs.err, new(redis.Error)) || theirs.err.Error() != re.Error() {
				t.Fatalf("%s %q: error reply %q here, go-redis: %v", cmd, reply, re, theirs)
			}
		case !errors.Is(ours.err, ErrProtocol) && !errors.Is(ours.err, io.EOF) && !errors.Is(ours.err, io.ErrUnexpectedEOF):
			t.Fatalf("%s %q: error %v is neither a reply, ErrProtocol nor a cut-short read", cmd, reply, ours.err)
		}
	}
}

// claimsHugeLength says whether a line of reply claims an array or string longer than 1 MiB.
func claimsHugeLength(reply string) bool {
	for l := range strings.SplitSeq(reply, "\n") {
		if len(l) > 1 && strings.ContainsRune("*$%~>=!|", rune(l[0])) {
			if n, err := strconv.Atoi(strings.TrimSuffix(l[1:], "\r")); err == nil && n > 1<<20 {
				return true
			}
		}
	}
	return false
}

const fuzzMost = 1000

// parseOurs reads reply as the stream transport does; a small buffer, fed a byte at a time, so
// that strings longer than it and replies that come in pieces are read too.
func parseOurs(cmd, reply string) (p parsed) {
	r := NewReader(iotest.OneByteReader(strings.NewReader(reply)), 128)
	var n int
	var deleted bool
	switch cmd {
	case "xreadgroup":
		n, p.err = r.StreamReply(fuzzMost)
	case "xautoclaim":
		p.next, n, deleted, p.err = r.AutoClaimReply(fuzzMost)
	case "xpending":
		if n, p.err = r.PendingReply(fuzzMost); p.err != nil {
			return p
		}
		for range n {
			var e pendingEntry
			if e.id, e.idle, e.count, p.err = r.Pending(); p.err != nil {
				return p
			}
			p.pending = append(p.pending, e)
		}
		return p
	}
	if p.err != nil {
		return p
	}
	if p.entries, p.err = readEntries(r, n); p.err == nil && deleted {
		p.deleted, p.err = r.Deleted()
	}
	return p
}

func readEntries(r *Reader, n int) ([]entry, error) {
	var out []entry
	for range n {
		id, pairs, err := r.Entry()
		if err != nil {
			return nil, err
		}
		e := entry{id: id, gone: pairs < 0, fields: map[string]string{}}
		for range pairs {
			k, err := r.String()
			if err != nil {
				return nil, err
			}
			v, err := r.BulkCopy()
			if err != nil {
				return nil, err
			}
			e.fields[k] = string(v)
		}
		out = append(out, e)
	}
	return out, nil
}

// parseGoRedis has a go-redis client send cmd to a fake server that answers with reply.
func parseGoRedis(t *testing.T, cmd, reply string) (p parsed) {
	c := redis.NewClient(&redis.Options{
		// An IP address and no maintenance notifications: nothing to look up in DNS.
		Addr: "127.0.0.1:0", Protocol: 2,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go fakeServer(server, reply)
			return client, nil
		},
	})
	defer c.Close()
	ctx := context.Background()
	var msgs []redis.XMessage
	switch cmd {
	case "xreadgroup":
		var res []redis.XStream
		res, p.err = c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"s", ">"}, Count: 10, Block: -1}).Result()
		if errors.Is(p.err, redis.Nil) {
			p.err = nil // a null reply: nothing new, as the transport reads it
		}
		if len(res) > 0 {
			msgs = res[0].Messages
		}
		if len(res) > 1 {
			p.err = fmt.Errorf("%d streams", len(res))
		}
	case "xautoclaim":
		msgs, p.next, p.deleted, p.err = c.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{Stream: "s", Group: "g", Consumer: "c", MinIdle: time.Second, Start: "0-0", Count: 10}).Result()
	case "xpending":
		var res []redis.XPendingExt
		res, p.err = c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "s", Group: "g", Start: "-", End: "+", Count: 10, Consumer: "c"}).Result()
		if errors.Is(p.err, redis.Nil) {
			p.err = nil
		}
		for _, x := range res {
			p.pending = append(p.pending, pendingEntry{x.ID, x.Idle, x.RetryCount})
		}
	}
	for _, m := range msgs {
		e := entry{id: m.ID, gone: m.Values == nil, fields: map[string]string{}}
		for k, v := range m.Values {
			e.fields[k] = fmt.Sprint(v)
		}
		p.entries = append(p.entries, e)
	}
	return p
}

// fakeServer answers HELLO with an error (go-redis then speaks RESP2 without it) and the next
// command with reply, then hangs up: a reply cut short is cut short, not waited for.
func fakeServer(nc net.Conn, reply string) {
	defer nc.Close()
	r := NewReader(nc, 4096)
	for {
		n, err := r.Array()
		if err != nil {
			return
		}
		var args []string
		for range n {
			a, err := r.String()
			if err != nil {
				return
			}
			args = append(args, a)
		}
		if len(args) > 0 && strings.EqualFold(args[0], "hello") {
			if _, err := nc.Write([]byte("-ERR unknown command 'HELLO'\r\n")); err != nil {
				return
			}
			continue
		}
		nc.Write([]byte(reply))
		return
	}
}

func equalParsed(a, b parsed) bool {
	return a.next == b.next && slices.Equal(a.deleted, b.deleted) && slices.Equal(a.pending, b.pending) &&
		slices.EqualFunc(a.entries, b.entries, func(x, y entry) bool {
			return x.id == y.id && x.gone == y.gone && maps.Equal(x.fields, y.fields)
		})
}
