package cli

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// client returns the client of a redis block, creating it on first use. An authentication or
// TLS failure at start is a configuration problem (exit 2 naming it, password redacted; never a
// fall back to plaintext); an unreachable server is not: sources wait for it with backoff.
func (w *wiring) client(name string) (redis.UniversalClient, error) {
	// Opening (a ping of up to 3 s) happens outside w.mu, once per block: a caller for another
	// block never waits for it.
	w.mu.Lock()
	slot := w.clients[name]
	if slot == nil {
		slot = &clientSlot{}
		w.clients[name] = slot
	}
	w.mu.Unlock()
	slot.once.Do(func() { slot.c, slot.err = w.openClient(slot, name) })
	return slot.c, slot.err
}

// openClient opens a redis block's client for client, once.
func (w *wiring) openClient(slot *clientSlot, name string) (redis.UniversalClient, error) {
	c, pingErr, err := openRedis(context.Background(), w.config(), name, 3*time.Second)
	if err != nil {
		return nil, err
	}
	if pingErr != nil {
		if redisconn.IsConfigError(pingErr) {
			c.Close()
			return nil, pingErr
		}
		w.log.Warn().Str("redis", name).Err(pingErr).Msg("redis not reachable yet; waiting for it")
	}
	slot.close = sync.OnceValue(c.Close)
	w.onClose(slot.close) // closed last: created before the sources that use it
	w.checkEviction(name, c, pingErr == nil)
	return c, nil
}

// reconfigure makes cfg the configuration new pipelines and emits are built from, and returns
// the redis blocks whose open client must go: gone or changed, or used by no pipeline of keep
// and not in also (the workflows' blocks). The caller closes each with dropClient once the
// pipelines that used it have stopped.
func (w *wiring) reconfigure(cfg *config.Config, keep []*config.Pipeline, also []string) []string {
	used := map[string]bool{}
	for _, b := range also {
		used[b] = true
	}
	for _, p := range keep {
		for _, b := range p.RedisBlocks() {
			used[b] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.cfg
	w.cfg = cfg
	var names []string
	for name := range w.clients {
		ob, nb := old.RedisBlock(name), cfg.RedisBlock(name)
		if used[name] && ob != nil && nb != nil && ob.Fingerprint() == nb.Fingerprint() {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// dropClient closes a redis block's client and forgets it: the next user opens a new one from
// the configuration of now.
func (w *wiring) dropClient(name string) {
	w.mu.Lock()
	slot := w.clients[name]
	delete(w.clients, name)
	w.mu.Unlock()
	if slot == nil {
		return
	}
	slot.once.Do(func() {}) // an open still under way finishes first
	if slot.close != nil {
		if err := slot.close(); err != nil {
			w.log.Warn().Err(err).Str("redis", name).Msg("closing")
		}
	}
}

// openRedis builds the client of a redis block and pings it within timeout. The client comes
// back even when the ping fails, with pingErr saying why (authentication failed, the TLS
// handshake failed, or the server cannot be reached): run waits for an unreachable server,
// inspect and dlq give up. Errors name the block and never contain its passwords.
func openRedis(ctx context.Context, cfg *config.Config, name string, timeout time.Duration) (c redis.UniversalClient, pingErr, err error) {
	b := cfg.RedisBlock(name)
	if b == nil {
		return nil, nil, fmt.Errorf("no redis block %q", name)
	}
	opts := redisOptions(b)
	if c, err = redisconn.New(opts); err != nil {
		return nil, nil, fmt.Errorf("redis %q: %w", name, redisconn.RedactError(err, opts.Secrets()...))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := redisconn.Ping(ctx, c); err != nil {
		err = redisconn.RedactError(err, opts.Secrets()...)
		if redisconn.IsAuthError(err) {
			return c, fmt.Errorf("redis %q: authentication failed: %w", name, err), nil
		}
		if problem, ok := redisconn.TLSProblem(err); ok {
			return c, fmt.Errorf("redis %q: TLS handshake failed: %s: %w", name, problem, err), nil
		}
		return c, fmt.Errorf("redis %q: cannot reach the server: %w", name, err), nil
	}
	return c, nil, nil
}

func redisOptions(b *config.Redis) redisconn.Options {
	o := redisconn.Options{URL: b.URL, Cluster: b.Cluster, Username: b.Username, Password: b.Password}
	if s := b.Sentinel; s != nil {
		o.SentinelMaster, o.SentinelAddrs = s.Master, s.Addrs
		o.SentinelUsername, o.SentinelPassword = s.Username, s.Password
	}
	if t := b.TLS; t != nil {
		o.TLS = &redisconn.TLSOptions{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	return o
}
