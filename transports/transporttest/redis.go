package transporttest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// Redis is the part of a Redis transport's Harness that looks at the server: it reads a key in
// the form SPEC §3 gives its kind, watches channels, and spoils a key for Poison. Embed it in a
// harness; it has a client of its own, closed when the test ends.
type Redis struct {
	Client *redis.Client
	addr   string

	mu      sync.Mutex
	ps      *redis.PubSub
	watched map[string]bool
	seen    map[string][]*engine.Message // by channel, in order
	pings   int
}

// NewRedis returns a Redis on the server at addr.
func NewRedis(t testing.TB, addr string) *Redis {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	r := &Redis{Client: c, addr: addr, watched: map[string]bool{}, seen: map[string][]*engine.Message{}}
	t.Cleanup(func() {
		r.mu.Lock()
		if r.ps != nil {
			r.ps.Close()
		}
		r.mu.Unlock()
		c.Close()
	})
	return r
}

// NewClient returns a client of the server for a source, closed when the test ends: a source
// gets a client of its own, as it would in a process of its own.
func (r *Redis) NewClient(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// ReadPath is how a Redis stream source reads its entries. The source reads on its connection's
// bare socket (its own RESP reader) where go-redis can tell that socket closed before reusing it
// (a plain TCP or unix connection: one with a syscall.Conn), and through go-redis everywhere
// else (TLS, a Cluster). Both paths must pass the same suite.
type ReadPath string

const (
	// ReadBare: a plain connection, read bare once go-redis has set it up.
	ReadBare ReadPath = "bare"
	// ReadGoRedis: a connection that, like a TLS one, has no syscall.Conn, so go-redis reads.
	ReadGoRedis ReadPath = "go-redis"
)

// ReadPaths are the read paths a stream source's conformance runs over.
var ReadPaths = []ReadPath{ReadBare, ReadGoRedis}

// NewClientFor is NewClient for a source that reads over path p.
func (r *Redis) NewClientFor(t testing.TB, p ReadPath) *redis.Client {
	if p != ReadGoRedis {
		return r.NewClient(t)
	}
	var d net.Dialer
	c := redis.NewClient(&redis.Options{Addr: r.addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return opaqueConn{nc}, nil
	}})
	t.Cleanup(func() { c.Close() })
	return c
}

// opaqueConn hides its connection's file descriptor (the net.Conn methods are all it has), as a
// *tls.Conn does.
type opaqueConn struct{ net.Conn }

// Watch subscribes to channels, so that Read can tell what is published to them from now on.
func (r *Redis) Watch(t testing.TB, channels ...string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx := context.Background()
	if r.ps == nil {
		r.ps = r.Client.Subscribe(ctx)
	}
	if err := r.ps.Subscribe(ctx, channels...); err != nil {
		t.Fatal(err)
	}
	for _, ch := range channels {
		r.watched[ch] = true
	}
	r.flush(t) // the confirmations come before the PONG
}

// flush reads what the watching connection has received up to a PING sent now: Redis answers
// in order, so every message published before the PING is in r.seen afterwards. r.mu is held.
func (r *Redis) flush(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	r.pings++
	token := fmt.Sprintf("flush-%d", r.pings)
	if err := r.ps.Ping(ctx, token); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(Timeout)
	for {
		v, err := r.ps.ReceiveTimeout(ctx, time.Until(deadline))
		if err != nil {
			t.Fatalf("watching channels: %v", err)
		}
		switch m := v.(type) {
		case *redis.Pong:
			if m.Payload == token {
				return
			}
		case *redis.Message:
			h, p := codec.DecodeEnvelope([]byte(m.Payload))
			r.seen[m.Channel] = append(r.seen[m.Channel], &engine.Message{Key: m.Channel, Headers: h, Payload: p})
		}
	}
}

// Read returns what key holds, oldest first, decoded as SPEC §3 says for its kind: a stream's
// entries (with their ids), a list's elements in the order a source reads them (from the right),
// or, for a watched channel, every message published to it since Watch.
func (r *Redis) Read(t testing.TB, key string) []*engine.Message {
	t.Helper()
	ctx := context.Background()
	switch kind := r.Kind(t, key); kind {
	case KindStream:
		xs, err := r.Client.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := make([]*engine.Message, len(xs))
		for i, x := range xs {
			out[i] = &engine.Message{Key: key, ID: x.ID}
			codec.DecodeStream(out[i], x.Values)
		}
		return out
	case KindList:
		elems, err := r.Client.LRange(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Reverse(elems)
		out := make([]*engine.Message, len(elems))
		for i, e := range elems {
			h, p := codec.DecodeEnvelope([]byte(e))
			out[i] = &engine.Message{Key: key, Headers: h, Payload: p}
		}
		return out
	case KindChannel:
		r.mu.Lock()
		defer r.mu.Unlock()
		r.flush(t)
		return slices.Clone(r.seen[key])
	case "":
		return nil
	default:
		t.Fatalf("%s is a %s, not a stream, list or watched channel", key, kind)
		return nil
	}
}

// Kind is the kind of what key holds: KindStream, KindList, KindChannel for a watched channel
// with no key of that name, "" when there is nothing, or Redis's own type name.
func (r *Redis) Kind(t testing.TB, key string) string {
	t.Helper()
	typ, err := r.Client.Type(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	switch typ {
	case "none":
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.watched[key] {
			return KindChannel
		}
		return ""
	case "stream":
		return KindStream
	case "list":
		return KindList
	}
	return typ
}

// Poison makes key a string, so that every write of a stream or list command to it fails with
// WRONGTYPE, a permanent failure (SPEC §10). A fault names key itself.
func (r *Redis) Poison(t testing.TB, key string) string {
	t.Helper()
	if err := r.Client.Set(context.Background(), key, "poison", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return key
}

// Heal deletes what Poison put there.
func (r *Redis) Heal(t testing.TB, key string) {
	t.Helper()
	if err := r.Client.Del(context.Background(), key).Err(); err != nil {
		t.Fatal(err)
	}
}

// PendingCount is XPENDING's count for a stream's group, 0 when there is no group yet.
func (r *Redis) PendingCount(t testing.TB, stream, group string) int {
	t.Helper()
	p, err := r.Client.XPending(context.Background(), stream, group).Result()
	if err != nil {
		if isNoGroup(err) {
			return 0
		}
		t.Fatal(err)
	}
	return int(p.Count)
}

// Len is a list's length.
func (r *Redis) Len(t testing.TB, list string) int {
	t.Helper()
	n, err := r.Client.LLen(context.Background(), list).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

func isNoGroup(err error) bool {
	s := err.Error()
	return len(s) >= 7 && s[:7] == "NOGROUP"
}
