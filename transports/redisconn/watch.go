package redisconn

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"weak"

	"github.com/redis/go-redis/v9"
)

// ConnWatch counts the connections of one client that broke while in use. go-redis retries a
// command whose connection failed, on another connection, without telling the caller: when that
// command was a read whose reply was lost (XREADGROUP, BLMOVE), Redis did the read but nobody got
// the entries. A source that sees Broken change knows its own in-flight work may be stranded
// and recovers it (SPEC §10: a stream re-reads its own pending entries, a reliable list its
// processing list).
//
// A connection counts as broken when a read or write on it failed and it was then closed, or
// when it failed with anything but a timeout: the moment go-redis discards it with a command on
// it. A connection that merely ends (an idle one dropped by the pool, one found dead before use,
// a Pub/Sub receive that timed out and read again) does not count, and neither does a new
// connection by itself: a pool grows for load, not only after a failure.
type ConnWatch struct {
	broken atomic.Uint64
}

// Broken returns how many connections broke so far. Only changes are meaningful.
func (w *ConnWatch) Broken() uint64 { return w.broken.Load() }

// watches maps each watched client to its ConnWatch, so that every source of one client shares
// one hook and one count. Keys are weak pointers, removed when the client is collected, so a
// process that replaces its clients (a reload) does not keep the old ones alive.
var watches sync.Map // weak.Pointer[client type] (or the client itself) -> *ConnWatch

// Watch returns the ConnWatch of c, installing it on first use. Clients built by New are watched
// from the start. On a cluster client built elsewhere, only the connections of nodes the client
// creates after the first Watch are seen.
func Watch(c redis.UniversalClient) *ConnWatch {
	w, loaded := &ConnWatch{}, false
	switch cc := c.(type) {
	case *redis.Client:
		w, loaded = register(cc, w)
	case *redis.ClusterClient:
		w, loaded = register(cc, w)
	case *redis.Ring:
		w, loaded = register(cc, w)
	default:
		var actual any
		actual, loaded = watches.LoadOrStore(c, w)
		w = actual.(*ConnWatch)
	}
	if loaded {
		return w
	}
	h := watchHook{w}
	if cc, ok := c.(*redis.ClusterClient); ok {
		// Dials happen in the clients of the nodes, not in the cluster client.
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
	} else {
		c.AddHook(h)
	}
	return w
}

// register stores w for client p unless one is there; it reports whether one was.
func register[T any](p *T, w *ConnWatch) (*ConnWatch, bool) {
	k := weak.Make(p)
	if actual, loaded := watches.LoadOrStore(k, w); loaded {
		return actual.(*ConnWatch), true
	}
	runtime.AddCleanup(p, func(k weak.Pointer[T]) { watches.Delete(k) }, k)
	return w, false
}

// watchHook wraps every connection a client dials.
type watchHook struct{ w *ConnWatch }

func (h watchHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		wc := &watchedConn{Conn: conn, w: h.w}
		// go-redis checks an idle connection's health through syscall.Conn before reusing it;
		// keep that working for plain TCP and unix sockets (a TLS connection has none).
		if sc, ok := conn.(syscall.Conn); ok {
			return &watchedSysConn{watchedConn: wc, sc: sc}, nil
		}
		return wc, nil
	}
}

func (h watchHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h watchHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// watchedConn notes the failure of a read or write on the connection.
type watchedConn struct {
	net.Conn
	w *ConnWatch

	failed  atomic.Bool // the last read or write failed with a timeout
	counted atomic.Bool
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.note(n, err)
	return n, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.note(n, err)
	return n, err
}

// note records the outcome of one read or write. A timeout is not yet a break: Pub/Sub reads
// with a timeout and then reads on; the connection counts only if it is closed without a
// successful read or write since. Any other failure counts at once.
func (c *watchedConn) note(n int, err error) {
	if err == nil {
		if n > 0 {
			c.failed.Store(false)
		}
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.failed.Store(true)
		return
	}
	if errors.Is(err, net.ErrClosed) {
		return // closed here first: Close decided
	}
	c.count()
}

func (c *watchedConn) count() {
	if c.counted.CompareAndSwap(false, true) {
		c.w.broken.Add(1)
	}
}

func (c *watchedConn) Close() error {
	if c.failed.Load() {
		c.count()
	}
	c.counted.Store(true) // a read failing after Close is not a break
	return c.Conn.Close()
}

// NetConn returns the wrapped connection, as crypto/tls.Conn does, for code that unwraps.
func (c *watchedConn) NetConn() net.Conn { return c.Conn }

// watchedSysConn is a watchedConn over a connection with a file descriptor.
type watchedSysConn struct {
	*watchedConn
	sc syscall.Conn
}

func (c *watchedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }
