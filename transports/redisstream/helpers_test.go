package redisstream

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/transports/transporttest"
)

// env is one test's Redis: a server, a client for assertions and a unique key prefix.
type env struct {
	t   *testing.T
	srv *redistest.Server
	rdb *redis.Client
	ctx context.Context
}

// newEnv is the package's shared server, emptied for the test.
func newEnv(t *testing.T) *env {
	t.Helper()
	srv, rdb := redistest.Fresh(t)
	return &env{t: t, srv: srv, rdb: rdb, ctx: context.Background()}
}

// newOwnEnv is a server of the test's own, for a test that stops, restarts or kills it, kills
// its clients or counts them.
func newOwnEnv(t *testing.T) *env {
	t.Helper()
	srv := redistest.Start(t)
	return &env{t: t, srv: srv, rdb: srv.Client(t), ctx: context.Background()}
}

// recorder is a go-redis hook that records command names, pipelines included, so tests can
// assert how many round trips and which commands a settlement used.
type recorder struct {
	mu   sync.Mutex
	cmds []string
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add(cmd)
		return next(ctx, cmd)
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.add(c)
		}
		return next(ctx, cmds)
	}
}

func (r *recorder) add(c redis.Cmder) {
	r.mu.Lock()
	r.cmds = append(r.cmds, strings.ToLower(c.Name()))
	r.mu.Unlock()
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.cmds = nil
	r.mu.Unlock()
}

func (r *recorder) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.cmds...)
}

// client returns a fresh client for a source (owned by the test) with a recorder.
func (e *env) client() (*redis.Client, *recorder) {
	c := e.srv.NewClient()
	rec := &recorder{}
	c.AddHook(rec)
	e.t.Cleanup(func() { c.Close() })
	return c, rec
}

// running is a source with Receive running in the background (transporttest.Receiver).
type running struct {
	*transporttest.Receiver
	src *Source
	rec *recorder
}

func (e *env) start(opts Options) *running {
	e.t.Helper()
	c, rec := e.client()
	return e.startWith(c, rec, opts)
}

// startWith starts a source on a client of the test's own.
func (e *env) startWith(c *redis.Client, rec *recorder, opts Options) *running {
	e.t.Helper()
	src, err := New(c, opts, zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.run(src, rec)
}

func (e *env) run(src *Source, rec *recorder) *running {
	return &running{Receiver: transporttest.Receive(e.t, src, src.o.Batch), src: src, rec: rec}
}

func (r *running) settle(t *testing.T, sts ...engine.Settlement) {
	t.Helper()
	if err := r.src.Settle(context.Background(), sts); err != nil {
		t.Fatalf("settle: %v", err)
	}
}

func ack(ds ...*engine.Delivery) []engine.Settlement {
	out := make([]engine.Settlement, len(ds))
	for i, d := range ds {
		out[i] = engine.Settlement{Delivery: d, Action: engine.ActAck}
	}
	return out
}

func (e *env) xadd(stream string, fields ...string) string {
	e.t.Helper()
	id, err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: stream, Values: fields}).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func (e *env) xaddN(stream string, n int) []string {
	e.t.Helper()
	ids := make([]string, n)
	cmds, err := e.rdb.Pipelined(e.ctx, func(p redis.Pipeliner) error {
		for i := range n {
			p.XAdd(e.ctx, &redis.XAddArgs{Stream: stream, Values: []string{"payload", fmt.Sprintf("m%d", i)}})
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	for i, c := range cmds {
		ids[i] = c.(*redis.StringCmd).Val()
	}
	return ids
}

// pending returns XPENDING's summary count for the group.
func (e *env) pending(stream, group string) int64 {
	e.t.Helper()
	p, err := e.rdb.XPending(e.ctx, stream, group).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Count
}

func (e *env) pendingOf(stream, group, id string) (redis.XPendingExt, bool) {
	e.t.Helper()
	p, err := e.rdb.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	if len(p) == 0 {
		return redis.XPendingExt{}, false
	}
	return p[0], true
}

func (e *env) xrange(stream string) []redis.XMessage {
	e.t.Helper()
	m, err := e.rdb.XRange(e.ctx, stream, "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) waitFor(what string, timeout time.Duration, cond func() bool) {
	e.t.Helper()
	if !redistest.WaitFor(e.ctx, timeout, cond) {
		e.t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// fieldsOf returns an entry's fields as a map of strings.
func fieldsOf(m redis.XMessage) map[string]string {
	out := make(map[string]string, len(m.Values))
	for k, v := range m.Values {
		out[k] = v.(string)
	}
	return out
}

func count(names []string, name string) int {
	n := 0
	for _, x := range names {
		if x == name {
			n++
		}
	}
	return n
}

// killClients drops every connection but the caller's, as a network blip would.
func (e *env) killClients() {
	e.t.Helper()
	if err := e.rdb.Do(e.ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		e.t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestMain(m *testing.M) {
	// go-redis prints every failed dial to stderr; fault tests cause many on purpose.
	redisconn.SetDriverLogger(zerolog.Nop())
	os.Exit(redistest.Main(m)) // one redis-server shared by the tests that need no server of their own

}

// tokenIs reports whether d's settle token is a *string holding id, as reads set it.
func tokenIs(d *engine.Delivery, id string) bool {
	p, ok := d.Token.(*string)
	return ok && p != nil && *p == id
}
