package cli

import (
	"context"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// evictionTimeout bounds one look at a server's maxmemory-policy.
const evictionTimeout = 3 * time.Second

// checkEviction warns, once per Redis, when its maxmemory-policy evicts keys (SPEC §10
// "Eviction"). Redis blocks that name the same server (other users, say) share one look. A
// server not reachable yet is looked at once it answers, in the background; a user granted
// neither INFO nor CONFIG (an exact ACL) is refused, which is logged at debug: the check never
// holds up or fails a start.
func (w *wiring) checkEviction(name string, c redis.UniversalClient, reachable bool) {
	b := w.config().RedisBlock(name)
	if b == nil {
		return
	}
	id := redisIdentity(b)
	w.mu.Lock()
	if w.evictionSeen == nil {
		w.evictionSeen = map[string]bool{}
	}
	seen := w.evictionSeen[id]
	w.evictionSeen[id] = true
	w.mu.Unlock()
	if seen {
		return
	}
	if reachable && w.lookAtEviction(name, c) {
		return
	}
	go func() {
		bo := redisconn.Backoff{}
		for redisconn.Sleep(context.Background(), bo.Next()) {
			if w.isClosed() || w.lookAtEviction(name, c) {
				return
			}
		}
	}()
}

// lookAtEviction asks once and logs what it learnt; it reports false when the server could not
// be reached (try again later).
func (w *wiring) lookAtEviction(name string, c redis.UniversalClient) bool {
	ctx, cancel := context.WithTimeout(context.Background(), evictionTimeout)
	defer cancel()
	nodes, err := redisconn.EvictionPolicies(ctx, c)
	if err != nil {
		err = redisconn.RedactError(err, redisconn.SecretsOf(c)...)
		if redisconn.IsConnError(err) || ctx.Err() != nil {
			return false
		}
		w.log.Debug().Str("redis", name).Err(err).
			Msg("could not read maxmemory-policy (INFO memory and CONFIG GET refused): no eviction check")
		return true
	}
	for _, n := range nodes {
		if n.Policy == redisconn.NoEviction {
			continue
		}
		w.log.Warn().Str("redis", name).Str("addr", n.Addr).Str("maxmemory_policy", n.Policy).
			Msg("redis maxmemory-policy is " + n.Policy + ", not " + redisconn.NoEviction + ": " + redisconn.EvictionCost)
	}
	return true
}

func (w *wiring) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// redisIdentity names the server(s) a redis block connects to, without its credentials.
func redisIdentity(b *config.Redis) string {
	switch {
	case len(b.Cluster) > 0:
		addrs := append([]string(nil), b.Cluster...)
		sort.Strings(addrs)
		return "cluster " + strings.Join(addrs, ",")
	case b.Sentinel != nil:
		addrs := append([]string(nil), b.Sentinel.Addrs...)
		sort.Strings(addrs)
		return "sentinel " + b.Sentinel.Master + " " + strings.Join(addrs, ",")
	}
	if u, err := url.Parse(b.URL); err == nil {
		u.User = nil
		return u.String()
	}
	return b.URL
}
