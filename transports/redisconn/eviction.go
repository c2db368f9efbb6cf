package redisconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// NoEviction is the only maxmemory-policy under which Redis never drops a key on its own.
const NoEviction = "noeviction"

// EvictionCost is what an evicting Redis may cost flowrun's users (SPEC §10 "Eviction").
const EvictionCost = "an evicting Redis can silently drop stream entries, pending entries, delay queues, dead letters and workflow runs"

// NodePolicy is one server's maxmemory-policy.
type NodePolicy struct {
	Addr   string
	Policy string
}

// EvictionPolicies reads maxmemory-policy from the server c talks to, or from every master of a
// Cluster. It asks INFO memory first (its maxmemory_policy field), which reads no secret, and
// CONFIG GET maxmemory-policy where INFO is refused or lacks the field (CONFIG is what managed
// services most often turn off, and CONFIG GET can read passwords, so it is not the one to
// grant). The error says why neither answered (a user granted neither: NOPERM).
func EvictionPolicies(ctx context.Context, c redis.UniversalClient) ([]NodePolicy, error) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var out []NodePolicy
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			p, err := EvictionPolicy(ctx, n)
			if err != nil {
				return err
			}
			mu.Lock()
			out = append(out, NodePolicy{Addr: n.Options().Addr, Policy: p})
			mu.Unlock()
			return nil
		})
		return out, err
	}
	p, err := EvictionPolicy(ctx, c)
	if err != nil {
		return nil, err
	}
	addr := ""
	if rc, ok := c.(*redis.Client); ok {
		addr = rc.Options().Addr
	}
	return []NodePolicy{{Addr: addr, Policy: p}}, nil
}

// EvictionPolicy reads one server's maxmemory-policy (see EvictionPolicies).
func EvictionPolicy(ctx context.Context, c redis.Cmdable) (string, error) {
	info, infoErr := c.Info(ctx, "memory").Result()
	if infoErr == nil {
		if p, ok := infoField(info, "maxmemory_policy"); ok {
			return p, nil
		}
		infoErr = errors.New("INFO memory has no maxmemory_policy")
	}
	if IsConnError(infoErr) || ctx.Err() != nil {
		return "", fmt.Errorf("info memory: %w", infoErr)
	}
	vals, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", fmt.Errorf("info memory: %v; config get maxmemory-policy: %w", infoErr, err)
	}
	if p, ok := vals["maxmemory-policy"]; ok && p != "" {
		return p, nil
	}
	return "", fmt.Errorf("info memory: %v; config get maxmemory-policy: no value", infoErr)
}

// infoField returns the value of name in an INFO reply ("name:value" lines).
func infoField(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}
