package redisstream

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/internal/resp"
)

// The reads of new entries go through go-redis until it has dialled and set up the source's
// connection, then on the bare connection; what they deliver is the same either way, an error
// reply leaves the connection in use, and a broken connection is dialled anew.
func TestRawReadsAfterSetup(t *testing.T) {
	e := newEnv(t)
	src := newTestSource(t, e, Options{Kind: KindStream, Stream: "s", Group: "g", Consumer: "c", Batch: 10})
	if err := e.rdb.XGroupCreateMkStream(e.ctx, "s", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	r := &reader{s: src}
	r.rc = src.newReadClient(r.dialed.Store)
	defer r.rc.Close()
	defer r.dropConn()
	type want struct {
		id, payload string
		headers     map[string]string
	}
	read := func(step string, ws ...want) {
		t.Helper()
		ds, err := r.readNew(e.ctx, 10, -1)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if len(ds) != len(ws) {
			t.Fatalf("%s: read %d, want %d", step, len(ds), len(ws))
		}
		for i, d := range ds {
			w := ws[i]
			if w.headers == nil {
				w.headers = map[string]string{}
			}
			if d.ID != w.id || !tokenIs(d, w.id) || d.Key != "s" || string(d.Payload) != w.payload || !maps.Equal(d.Headers, w.headers) {
				t.Fatalf("%s: read %s %q %v, want %s %q %v", step, d.ID, d.Payload, d.Headers, w.id, w.payload, w.headers)
			}
		}
	}
	id := e.xadd("s", "payload", `{"n":1}`, "k", "v")
	read("through go-redis", want{id, `{"n":1}`, map[string]string{"k": "v"}})
	if r.raw == nil {
		t.Fatal("no bare connection after the first read")
	}
	first := r.raw.nc
	a := e.xadd("s", "payload", "p")
	b := e.xadd("s", "k", "1", "k", "2", "h", "") // no payload; a field given twice
	big := strings.Repeat("x", 100<<10)           // over the read buffer
	c := e.xadd("s", "payload", big, "payload", "last")
	d := e.xadd("s", "payload", big)
	read("bare", want{a, "p", nil}, want{b, "", map[string]string{"k": "2", "h": ""}}, want{c, "last", nil}, want{d, big, nil})

	// Nothing new, blocking and not: a null reply.
	if ds, gone, err := r.raw.readGroup(e.ctx, src, ">", 10, 20*time.Millisecond); err != nil || len(ds)+len(gone) != 0 {
		t.Fatalf("blocking read of nothing: %d, %v, %v", len(ds), gone, err)
	}
	read("nothing")
	// An entry whose data is gone comes back on a re-read of the pending ones without fields.
	e.rdb.XDel(e.ctx, "s", a)
	ds, gone, err := r.raw.readGroup(e.ctx, src, "0", 10, -1)
	if err != nil || len(ds) != 4 || len(gone) != 1 || gone[0] != a {
		t.Fatalf("pending re-read: %d read, gone %v, %v; want 4 and %s", len(ds), gone, err, a)
	}
	// An error reply leaves the connection as it was.
	other := &Source{o: src.o}
	other.o.Group = "nogroup"
	if _, _, err := r.raw.readGroup(e.ctx, other, ">", 10, -1); err == nil || !isNoGroup(err) {
		t.Fatalf("read of a missing group: %v, want NOGROUP", err)
	} else if !errors.As(err, new(redis.Error)) {
		t.Fatalf("error reply %v is not a redis.Error", err)
	}
	id = e.xadd("s", "payload", "after error")
	read("after an error reply", want{id, "after error", nil})

	// The server drops the connection: the read fails, then the next goes through a new one.
	if err := e.rdb.Do(e.ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.readNew(e.ctx, 10, -1); err == nil {
		t.Fatal("read on a killed connection succeeded")
	}
	r.dropConn() // as Receive does after an error
	id = e.xadd("s", "payload", "again")
	read("after the connection broke", want{id, "again", nil})
	if r.raw == nil || r.raw.nc == first {
		t.Fatal("no new bare connection after the old one broke")
	}
}

// A reply that arrives in pieces (one byte at a time, or half of what is asked for) parses as
// one that arrives whole: nothing is read from the buffer after a later read has refilled it.
func TestRawReplyInPieces(t *testing.T) {
	const n = 1000
	reply := streamReplyOf(n, true)
	src := &Source{o: Options{Kind: KindStream, Stream: "s"}}
	for name, rd := range map[string]io.Reader{
		"whole":    strings.NewReader(reply),
		"one byte": iotest.OneByteReader(strings.NewReader(reply)),
		"halves":   iotest.HalfReader(strings.NewReader(reply)),
	} {
		r := &rawRead{rd: resp.NewReader(rd, 32<<10), most: n}
		ds, _, err := r.streamReply(src)
		if err != nil || len(ds) != n {
			t.Fatalf("%s: %d read, %v", name, len(ds), err)
		}
		for i, d := range ds {
			id := fmt.Sprintf("1796163070146-%d", i)
			if d.ID != id || d.Headers["k"] != id || !strings.HasPrefix(string(d.Payload), fmt.Sprintf(`{"id":%d,`, i)) {
				t.Fatalf("%s: entry %d read as %q %v %q", name, i, d.ID, d.Headers, d.Payload)
			}
		}
	}
}

// A malformed or cut-short reply is an error, never a panic (XREADGROUP's, XAUTOCLAIM's,
// XPENDING's), nor an allocation of what a length that no reply has claims.
func FuzzRawStreamReply(f *testing.F) {
	f.Add("*-1\r\n")
	f.Add("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$7\r\npayload\r\n$1\r\nx\r\n")
	f.Add("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*-1\r\n")
	f.Add("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n")
	f.Add("-NOGROUP No such key\r\n")
	f.Add("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$-1\r\n")
	f.Add("*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nk\r\n$5\r\nx\r\n")
	src := &Source{o: Options{Kind: KindReclaim, Stream: "s"}}
	f.Add("*3\r\n$3\r\n0-0\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*-1\r\n*1\r\n$3\r\n2-1\r\n")
	f.Add("*1\r\n*4\r\n$3\r\n1-1\r\n$1\r\na\r\n:1000\r\n:2\r\n")
	f.Add("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$7\r\npayload\r\n$999999999\r\nx")
	f.Add("*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*999999998\r\n$1\r\nk\r\n")
	f.Fuzz(func(t *testing.T, reply string) {
		in := func() *rawRead {
			return &rawRead{rd: resp.NewReader(iotest.OneByteReader(strings.NewReader(reply)), 64), most: 1000}
		}
		in().autoClaimReply(src)
		in().pendingReply()
		r := in()
		ds, _, err := r.streamReply(src)
		if err != nil {
			return
		}
		for _, d := range ds {
			if d.Headers == nil || !tokenIs(d, d.ID) {
				t.Fatalf("delivery %q: headers %v, token %v", d.ID, d.Headers, d.Token)
			}
		}
	})
}

// Reclaim's XAUTOCLAIM and the XPENDING behind it, on the bare connection: the claimed entries,
// the ids whose data is gone, and the delivery counts; an error reply leaves both in step.
func TestRawAutoClaim(t *testing.T) {
	e := newEnv(t)
	ids := deadBacklog(e, 3)
	e.rdb.XDel(e.ctx, "s", ids[1])
	src := newTestSource(t, e, claimOpts(KindReclaim, "a"))
	r := &reader{s: src}
	r.rc = src.newReadClient(r.dialed.Store)
	defer r.rc.Close()
	defer r.dropConn()
	raw := r.bare(e.ctx, r.readClient().(*redis.Conn))
	if raw == nil {
		t.Fatal("no bare connection")
	}
	other := &Source{o: src.o}
	other.o.Group = "nogroup"
	if _, _, _, _, err := raw.autoClaim(e.ctx, other, "0-0", 10, 20); err == nil || !isNoGroup(err) {
		t.Fatalf("xautoclaim of a missing group: %v, want NOGROUP", err)
	}
	next, ds, gone, known, err := raw.autoClaim(e.ctx, src, "0-0", 10, 20)
	if err != nil || next != "0-0" || len(ds) != 2 || ds[0].ID != ids[0] || ds[1].ID != ids[2] {
		t.Fatalf("xautoclaim: next %q, %d claimed, %v", next, len(ds), err)
	}
	if len(gone) != 1 || gone[0] != ids[1] {
		t.Fatalf("gone %v, want %s", gone, ids[1])
	}
	if len(known) != 2 || known[0].ID != ids[0] || known[0].RetryCount != 2 || known[1].ID != ids[2] || known[1].RetryCount != 2 {
		t.Fatalf("counts %+v, want both entries at 2", known)
	}
	if raw.broken.Load() {
		t.Fatal("connection given up after replies read whole")
	}
}

// A user whose ACL refuses PING (docs/acl.md grants it, not every setup does)
// still reads bare: a refusal is an answer, so go-redis has set the connection up.
func TestRawReadsWithoutPing(t *testing.T) {
	e := newOwnEnv(t)
	if err := e.rdb.Do(e.ctx, "ACL", "SETUSER", "noping", "on", ">pw", "~*", "&*", "+@all", "-ping").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.XGroupCreateMkStream(e.ctx, "s", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: e.srv.Addr, Username: "noping", Password: "pw"})
	defer c.Close()
	if err := c.Ping(e.ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("PING as noping: %v, want NOPERM", err)
	}
	src, err := New(c, Options{Kind: KindStream, Stream: "s", Group: "g", Consumer: "c", Batch: 10}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r := &reader{s: src}
	r.rc = src.newReadClient(r.dialed.Store)
	defer r.rc.Close()
	defer r.dropConn()
	for i, want := range []string{"first", "second"} {
		e.xadd("s", "payload", want)
		ds, err := r.readNew(e.ctx, 10, -1)
		if err != nil || len(ds) != 1 || string(ds[0].Payload) != want {
			t.Fatalf("read %d: %d deliveries, %v; want %q", i, len(ds), err, want)
		}
		if r.raw == nil {
			t.Fatalf("read %d: no bare connection with PING refused", i)
		}
	}
}

// streamReplyOf is an XREADGROUP reply of n entries of stream s, each a payload and, withK, a
// header k holding the entry's id.
func streamReplyOf(n int, withK bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*1\r\n*2\r\n$1\r\ns\r\n*%d\r\n", n)
	for i := range n {
		id := fmt.Sprintf("1796163070146-%d", i)
		p := fmt.Sprintf(`{"id":%d,"amount":37.5,"currency":"USD","customer":"c01"}`, i)
		if withK {
			fmt.Fprintf(&b, "*2\r\n$%d\r\n%s\r\n*4\r\n$1\r\nk\r\n$%d\r\n%s\r\n", len(id), id, len(id), id)
		} else {
			fmt.Fprintf(&b, "*2\r\n$%d\r\n%s\r\n*2\r\n", len(id), id)
		}
		fmt.Fprintf(&b, "$7\r\npayload\r\n$%d\r\n%s\r\n", len(p), p)
	}
	return b.String()
}

// The bare read's parse alone, no Redis: a reply of 1000 payload-only entries into deliveries
// (`go test -run '^$' -bench RawParse ./transports/redisstream/`; 3 allocations an entry).
func BenchmarkRawParse(b *testing.B) {
	const n = 1000
	reply := streamReplyOf(n, false)
	src := &Source{o: Options{Kind: KindStream, Stream: "s"}}
	rd := strings.NewReader(reply)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(reply)
		r := &rawRead{rd: resp.NewReader(rd, 32<<10), most: n}
		if ds, _, err := r.streamReply(src); err != nil || len(ds) != n {
			b.Fatal(len(ds), err)
		}
	}
}

// A claiming pass whose write fails while the pass before it is still to be read does not take
// that pass down: Redis answers the earlier pass all the same, so its entries are handed over
// (not left to come back as one attempt more); nothing more is written on the connection, and
// it is given up only once the failed pass's turn comes (readPass).
func TestRawClaimWriteFailureSparesThePassBefore(t *testing.T) {
	e := newEnv(t)
	ids := deadBacklog(e, 4)
	src := newTestSource(t, e, claimOpts(KindClaiming, "a"))
	r := &reader{s: src}
	r.rc = src.newReadClient(r.dialed.Store)
	defer r.rc.Close()
	defer r.dropConn()
	raw := r.bare(e.ctx, r.readClient().(*redis.Conn))
	if raw == nil {
		t.Fatal("no bare connection")
	}
	raw.nc = &failWrites{Conn: raw.nc, after: 1}
	if err := raw.sendClaim(e.ctx, src, ids[:2], "", 0); err != nil {
		t.Fatalf("first pass: %v", err)
	}
	if err := raw.sendClaim(e.ctx, src, ids[2:], "", 0); err == nil {
		t.Fatal("the second pass's write did not fail")
	}
	if raw.broken.Load() {
		t.Fatal("the connection was given up with the first pass's replies still to read")
	}
	ds, _, _, _, err := raw.claimReplies(src, 2, 0)
	if err != nil || len(ds) != 2 || ds[0].ID != ids[0] || ds[1].ID != ids[1] {
		t.Fatalf("the first pass read %d entries, %v; want %v", len(ds), err, ids[:2])
	}
	if err := raw.send(0, []string{"PING"}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after the failed one: %v, want net.ErrClosed", err)
	}
}

// failWrites is a connection whose writes fail after the first `after`.
type failWrites struct {
	net.Conn
	after, n int
}

func (c *failWrites) Write(b []byte) (int, error) {
	if c.n++; c.n > c.after {
		return 0, errors.New("write: broken pipe")
	}
	return c.Conn.Write(b)
}
