package resp

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func reader(s string) *Reader { return NewReader(strings.NewReader(s), 64) }

func TestAppendCommand(t *testing.T) {
	got := string(AppendCommand([]byte("x"), "XREADGROUP", "", "é"))
	if want := "x*3\r\n$10\r\nXREADGROUP\r\n$0\r\n\r\n$2\r\né\r\n"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	// A request reads back as the arrays of bulk strings it is.
	r := reader(string(AppendCommand(nil, "a", "bc")))
	if n, err := r.Array(); n != 2 || err != nil {
		t.Fatalf("array %d, %v", n, err)
	}
	for _, want := range []string{"a", "bc"} {
		if s, err := r.String(); s != want || err != nil {
			t.Fatalf("%q, %v; want %q", s, err, want)
		}
	}
}

func TestPrimitives(t *testing.T) {
	r := reader("*-1\r\n:-42\r\n$0\r\n\r\n-ERR oops\r\n*x\r\n")
	if n, err := r.ArrayLen(); n != -1 || err != nil {
		t.Fatalf("null array: %d, %v", n, err)
	}
	if n, err := r.Int(); n != -42 || err != nil {
		t.Fatalf("int: %d, %v", n, err)
	}
	if b, err := r.Bulk(); len(b) != 0 || err != nil {
		t.Fatalf("empty string: %q, %v", b, err)
	}
	var re Error
	if _, err := r.Bulk(); !errors.As(err, &re) || re != "ERR oops" {
		t.Fatalf("error reply: %v", err)
	}
	if _, err := r.ArrayLen(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("bad length: %v, want ErrProtocol", err)
	}
	for _, bad := range []string{"$-1\r\n", "*-1\r\n", "$3\r\nabcd\r\n", "+OK\r\n", "*-2\r\n", "\r\n", "*1\n"} {
		r := reader(bad)
		var err error
		if bad[0] == '*' {
			_, err = r.Array()
		} else {
			_, err = r.Bulk()
		}
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: %v, want ErrProtocol", bad, err)
		}
	}
	if _, err := reader(strings.Repeat("x", 100)).Bulk(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a line over the buffer: %v, want ErrProtocol", err)
	}
}

// A string longer than the buffer is read whole, into a slice of its own; one whose length no
// reply has is not allocated before its bytes come.
func TestLongStrings(t *testing.T) {
	long := strings.Repeat("y", 1000)
	r := NewReader(iotest.HalfReader(strings.NewReader("$1000\r\n"+long+"\r\n$5\r\nshort\r\n")), 64)
	if b, err := r.Bulk(); string(b) != long || err != nil {
		t.Fatalf("long string: %d bytes, %v", len(b), err)
	}
	if b, err := r.BulkCopy(); string(b) != "short" || err != nil || cap(b) != 5 {
		t.Fatalf("copy: %q (cap %d), %v", b, cap(b), err)
	}
	allocs := testing.AllocsPerRun(10, func() {
		_, err := reader("$999999999\r\nabc").Bulk()
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut short: %v", err)
		}
	})
	if allocs > 20 {
		t.Fatalf("%v allocations for a string that never came", allocs)
	}
}

func TestStreamReply(t *testing.T) {
	r := reader("*1\r\n*2\r\n$1\r\ns\r\n*2\r\n" +
		"*2\r\n$3\r\n1-1\r\n*4\r\n$7\r\npayload\r\n$1\r\nx\r\n$1\r\nk\r\n$1\r\nv\r\n" +
		"*2\r\n$3\r\n1-2\r\n*-1\r\n")
	n, err := r.StreamReply(10)
	if n != 2 || err != nil {
		t.Fatalf("head: %d, %v", n, err)
	}
	id, pairs, err := r.Entry()
	if id != "1-1" || pairs != 2 || err != nil {
		t.Fatalf("entry: %q %d %v", id, pairs, err)
	}
	for _, want := range []string{"payload", "x", "k", "v"} {
		if s, err := r.String(); s != want || err != nil {
			t.Fatalf("field %q, %v; want %q", s, err, want)
		}
	}
	if id, pairs, err := r.Entry(); id != "1-2" || pairs != -1 || err != nil {
		t.Fatalf("entry whose data is gone: %q %d %v", id, pairs, err)
	}
	for _, empty := range []string{"*-1\r\n", "*0\r\n", "*1\r\n*2\r\n$1\r\ns\r\n*0\r\n"} {
		if n, err := reader(empty).StreamReply(10); n != 0 || err != nil {
			t.Errorf("%q: %d, %v; want nothing", empty, n, err)
		}
	}
	for _, bad := range []string{
		"*2\r\n",                                     // two streams
		"*1\r\n*3\r\n",                               // a stream of three elements
		"*1\r\n*2\r\n$1\r\ns\r\n*-1\r\n",             // a null entry list
		"*1\r\n*2\r\n$1\r\ns\r\n*11\r\n",             // more than asked for
		"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$-1\r\n", // null id (read by Entry)
	} {
		r := reader(bad)
		_, err := r.StreamReply(10)
		if err == nil {
			_, _, err = r.Entry()
		}
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: %v, want ErrProtocol", bad, err)
		}
	}
	if _, _, err := reader("*2\r\n$1\r\na\r\n*3\r\n").Entry(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("odd field list: %v", err)
	}
	var re Error
	if _, err := reader("-NOGROUP no group\r\n").StreamReply(10); !errors.As(err, &re) || re != "NOGROUP no group" {
		t.Fatalf("error reply: %v", err)
	}
}

func TestAutoClaimReply(t *testing.T) {
	r := reader("*3\r\n$3\r\n5-0\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\n2-1\r\n$3\r\n3-1\r\n")
	next, n, deleted, err := r.AutoClaimReply(10)
	if next != "5-0" || n != 1 || !deleted || err != nil {
		t.Fatalf("head: %q %d %v %v", next, n, deleted, err)
	}
	if id, pairs, err := r.Entry(); id != "1-1" || pairs != 1 || err != nil {
		t.Fatalf("entry: %q %d %v", id, pairs, err)
	}
	r.Bulk()
	r.Bulk()
	if ids, err := r.Deleted(); len(ids) != 2 || ids[0] != "2-1" || ids[1] != "3-1" || err != nil {
		t.Fatalf("deleted %q, %v", ids, err)
	}
	// Before Redis 7: two elements, no deleted list.
	if next, n, deleted, err := reader("*2\r\n$3\r\n0-0\r\n*0\r\n").AutoClaimReply(10); next != "0-0" || n != 0 || deleted || err != nil {
		t.Fatalf("redis 6 reply: %q %d %v %v", next, n, deleted, err)
	}
	for _, bad := range []string{"*-1\r\n", "*4\r\n", "*2\r\n$3\r\n0-0\r\n*-1\r\n", "*2\r\n$3\r\n0-0\r\n*11\r\n"} {
		if _, _, _, err := reader(bad).AutoClaimReply(10); !errors.Is(err, ErrProtocol) {
			t.Errorf("%q: %v, want ErrProtocol", bad, err)
		}
	}
}

func TestPendingReply(t *testing.T) {
	r := reader("*2\r\n*4\r\n$3\r\n1-1\r\n$1\r\nc\r\n:1500\r\n:3\r\n*4\r\n$3\r\n1-2\r\n$1\r\nc\r\n:0\r\n:1\r\n")
	n, err := r.PendingReply(2)
	if n != 2 || err != nil {
		t.Fatalf("head: %d, %v", n, err)
	}
	if id, idle, count, err := r.Pending(); id != "1-1" || idle != 1500*time.Millisecond || count != 3 || err != nil {
		t.Fatalf("first: %q %v %d %v", id, idle, count, err)
	}
	if id, idle, count, err := r.Pending(); id != "1-2" || idle != 0 || count != 1 || err != nil {
		t.Fatalf("second: %q %v %d %v", id, idle, count, err)
	}
	if n, err := reader("*-1\r\n").PendingReply(2); n != 0 || err != nil {
		t.Fatalf("null: %d, %v", n, err)
	}
	if _, err := reader("*3\r\n").PendingReply(2); !errors.Is(err, ErrProtocol) {
		t.Fatalf("more than asked for: %v", err)
	}
	if _, _, _, err := reader("*3\r\n").Pending(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("entry of three: %v", err)
	}
}

// The seeds of FuzzAgainstGoRedis, and well-formed replies of every shape built here, read the
// same here as in go-redis.
func TestWellFormedAgainstGoRedis(t *testing.T) {
	var b strings.Builder
	b.WriteString("*1\r\n*2\r\n$6\r\nstream\r\n*50\r\n")
	for i := range 50 {
		id := "1700000000000-" + strings.Repeat("9", i%7+1)
		payload := strings.Repeat("\x00\xff\r\n", i)
		b.WriteString("*2\r\n$" + strconv.Itoa(len(id)) + "\r\n" + id + "\r\n")
		if i%9 == 4 {
			b.WriteString("*-1\r\n")
			continue
		}
		b.WriteString("*4\r\n$7\r\npayload\r\n$" + strconv.Itoa(len(payload)) + "\r\n" + payload + "\r\n$1\r\nh\r\n$0\r\n\r\n")
	}
	checkAgainstGoRedis(t, b.String())
}
