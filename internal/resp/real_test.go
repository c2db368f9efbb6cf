package resp

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// Replies a real redis-server sends, each captured once as bytes and then read by both parsers
// (checkAgainstGoRedis): a stream's pending entries (one whose data was deleted, a binary
// payload, a repeated field), an XAUTOCLAIM that lists the deleted id, an extended XPENDING and
// an error reply. Sending each command twice would not do: XAUTOCLAIM changes what it replies.
func TestRealRepliesAgainstGoRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := srv.Client(t)
	if err := c.XGroupCreateMkStream(ctx, "s", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, values := range [][]string{
		{"payload", `{"n":1}`, "k", "v"},
		{"payload", "\x00\xff\r\n" + strings.Repeat("b", 100)},
		{"k", "1", "k", "2", "h", ""},
		{"payload", "gone"},
	} {
		id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: values}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"s", ">"}, Count: 10}).Err(); err != nil {
		t.Fatal(err)
	}
	c.XDel(ctx, "s", ids[3])
	nc, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, tt := range []struct {
		cmd  []string
		want string // what this package reads, as parsed.String says it
	}{
		{[]string{"XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "s", "0"}, "4 entries, 1 gone"},
		{[]string{"XPENDING", "s", "g", "-", "+", "10", "c"}, "4 pending"},
		{[]string{"XAUTOCLAIM", "s", "g", "c", "0", "0-0", "COUNT", "10"}, "3 entries, 0 gone, 1 deleted"},
		{[]string{"XREADGROUP", "GROUP", "nogroup", "c", "COUNT", "10", "STREAMS", "s", ">"}, "error NOGROUP"},
		{[]string{"XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "s", ">"}, "0 entries, 0 gone"},
	} {
		reply := capture(t, nc, tt.cmd)
		ours := parseOurs(strings.ToLower(tt.cmd[0]), reply)
		if got := summary(ours); got != tt.want {
			t.Fatalf("%s: %q read as %s (%v), want %s", tt.cmd[0], reply, got, ours, tt.want)
		}
		checkAgainstGoRedis(t, reply)
	}
}

func summary(p parsed) string {
	switch {
	case p.err != nil:
		return "error " + strings.Fields(p.err.Error())[0]
	case p.pending != nil:
		return strconv.Itoa(len(p.pending)) + " pending"
	}
	gone := 0
	for _, e := range p.entries {
		if e.gone {
			gone++
		}
	}
	s := strconv.Itoa(len(p.entries)) + " entries, " + strconv.Itoa(gone) + " gone"
	if p.deleted != nil {
		s += ", " + strconv.Itoa(len(p.deleted)) + " deleted"
	}
	return s
}

// capture sends cmd and returns its reply's bytes as they came, read whole by skip.
func capture(t *testing.T, nc net.Conn, cmd []string) string {
	t.Helper()
	if _, err := nc.Write(AppendCommand(nil, cmd...)); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got bytes.Buffer
	// The server sends nothing but the reply, so what the reader takes from the connection is
	// the reply: the buffer never reads past it.
	r := NewReader(io.TeeReader(nc, &got), 1<<16)
	if err := skip(r); err != nil {
		t.Fatalf("%s: %v", cmd[0], err)
	}
	return got.String()
}

// skip reads one reply of any RESP2 shape.
func skip(r *Reader) error {
	l, err := r.line()
	if err != nil {
		return err
	}
	switch l[0] {
	case '*':
		n, err := strconv.Atoi(string(l[1:]))
		if err != nil {
			return err
		}
		for range max(n, 0) {
			if err := skip(r); err != nil {
				return err
			}
		}
	case '$':
		n, err := strconv.Atoi(string(l[1:]))
		if err != nil || n < 0 {
			return err
		}
		_, err = r.readFull(n, nil)
		return err
	}
	return nil
}
