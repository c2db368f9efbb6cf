package redisconn

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// slotRefresh makes a cluster client reload its slot map as soon as a command fails in a way
// that says the map may be stale: a MOVED redirection, CLUSTERDOWN, READONLY or MASTERDOWN (a
// failover in progress or just done), or a failed connection (a master that died). go-redis on
// its own reloads on MOVED and READONLY but otherwise only on a timer (ClusterStateReloadInterval,
// a minute by default), so after a failover reads kept going to the dead master for up to a
// minute. SPEC §10 bounds recovery at 10 s.
//
// A reload is asynchronous and go-redis coalesces concurrent requests (one reload at a time, at
// most one more queued), so calling it on every failure costs one CLUSTER SLOTS per failure
// burst, not one per command.
type slotRefresh struct{ c *redis.ClusterClient }

func (h slotRefresh) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slotRefresh) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if staleSlots(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

func (h slotRefresh) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		stale := staleSlots(err)
		for _, c := range cmds {
			if stale {
				break
			}
			stale = staleSlots(c.Err())
		}
		if stale {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

// staleSlots reports whether err means the cluster's slot map may have changed.
func staleSlots(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, context.Canceled) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		code, _, _ := strings.Cut(re.Error(), " ")
		switch code {
		case "MOVED", "CLUSTERDOWN", "READONLY", "MASTERDOWN":
			return true
		}
		return false
	}
	return IsConnError(err)
}
