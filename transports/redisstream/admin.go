package redisstream

// Operator tools over a stream source's keys, for flowrun inspect: what a backlog and a durable
// delay queue look like. The dead-letter tools (flowrun dlq) are in package streamdlq, shared
// with the Pub/Sub transport, whose dead letters are stream entries too.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/transports/internal/delayq"
)

// Stats is a stream source's backlog as flowrun inspect shows it.
type Stats struct {
	Length      int64 // XLEN; 0 for a missing stream
	GroupExists bool  // the consumer group exists; Lag, Pending and OldestIdle are zero otherwise
	// Lag is XINFO GROUPS' lag: entries not yet delivered to the group. -1 when Redis cannot
	// tell (entries were deleted or trimmed past the group's position).
	Lag int64
	// LagBound is, when Lag is -1, an upper bound of it (SPEC §10): the stream's entries-added
	// (XINFO STREAM) minus the group's entries-read. It equals Lag when Redis can tell.
	LagBound   int64
	Pending    int64         // XPENDING's count: delivered, not yet acknowledged
	OldestIdle time.Duration // idle time of the lowest pending id; 0 when nothing is pending
}

// ReadStats reads a stream's length and its group's lag and pending summary. A missing stream or
// group is not an error: it reads as empty.
func ReadStats(ctx context.Context, c redis.UniversalClient, stream, group string) (Stats, error) {
	var s Stats
	n, err := c.XLen(ctx, stream).Result()
	if err != nil {
		return s, fmt.Errorf("redisstream: xlen %s: %w", stream, err)
	}
	s.Length = n
	groups, err := c.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if isNoSuchKey(err) { // a missing stream has no groups
			return s, nil
		}
		return s, fmt.Errorf("redisstream: xinfo groups %s: %w", stream, err)
	}
	var entriesRead int64
	for _, g := range groups {
		if g.Name == group {
			// XINFO GROUPS' pending is the pending entries list's length, XPENDING's count.
			s.GroupExists, s.Lag, s.Pending, entriesRead = true, g.Lag, g.Pending, g.EntriesRead
		}
	}
	s.LagBound = s.Lag
	if s.GroupExists && s.Lag < 0 {
		// Redis cannot tell (entries deleted or trimmed past the group): an upper bound.
		info, err := c.XInfoStream(ctx, stream).Result()
		if err != nil {
			return s, fmt.Errorf("redisstream: xinfo stream %s: %w", stream, err)
		}
		s.LagBound = max(info.EntriesAdded-entriesRead, 0)
	}
	if s.Pending == 0 {
		return s, nil
	}
	ext, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 1}).Result()
	if err != nil && !isNoGroup(err) { // a group deleted meanwhile reads as nothing pending
		return s, fmt.Errorf("redisstream: xpending %s %s - + 1: %w", stream, group, err)
	}
	if len(ext) > 0 {
		s.OldestIdle = ext[0].Idle
	}
	return s, nil
}

// DelayStats is a durable_zset delay queue as flowrun inspect shows it.
type DelayStats = delayq.Stats

// ReadDelayStats reads a durable_zset delay queue's size and next due time.
func ReadDelayStats(ctx context.Context, c redis.UniversalClient, key string) (DelayStats, error) {
	d, err := delayq.ReadStats(ctx, c, key)
	if err != nil {
		return d, fmt.Errorf("redisstream: %w", err)
	}
	return d, nil
}

func isNoGroup(err error) bool { return strings.HasPrefix(err.Error(), "NOGROUP") }

func isNoSuchKey(err error) bool { return strings.Contains(err.Error(), "no such key") }
