// Package delayq is what the two durable delay queues (delayed_retry = "durable_zset") share: a
// sorted set of delayed copies scored by their due time in wall-clock milliseconds, the earliest
// due time a source knows of, and the queue's statistics for flowrun inspect.
//
// The members and the move-back scripts stay each transport's own, and must differ: a stream's
// member is raw JSON of the entry's fields that its script rebuilds an XADD from with cjson
// (redisstream/message.go), a list's member is the element itself, byte for byte, behind a random
// prefix that its script cuts off before LPUSH (redislist/delay.go).
package delayq

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A source keeps the earliest due time it knows of, in unix ms (0: none), in an atomic.Int64.

// Lower records in next a delayed copy due at ms, if it is earlier than the one known.
func Lower(next *atomic.Int64, ms int64) {
	for {
		cur := next.Load()
		if cur != 0 && cur <= ms {
			return
		}
		if next.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// BlockFor is how long a read may block: block, but no longer than until next (unix ms, 0:
// none) comes due, and at least a millisecond, so a delay is honoured to well within a block.
func BlockFor(block time.Duration, next int64) time.Duration {
	if next != 0 {
		if until := time.Until(time.UnixMilli(next)); until < block {
			return max(until.Round(time.Millisecond), time.Millisecond)
		}
	}
	return block
}

// ParseScore reads the next due time from a move-back script's reply, the lowest score left as
// Redis writes a score ("" when the queue is empty: 0).
func ParseScore(score string) int64 {
	if score != "" {
		if f, err := strconv.ParseFloat(score, 64); err == nil {
			return int64(f)
		}
	}
	return 0
}

// Stats is a delay queue as flowrun inspect shows it.
type Stats struct {
	Size    int64     // ZCARD
	NextDue time.Time // the lowest score (wall-clock ms); zero when the queue is empty
}

// ReadStats reads a delay queue's size and next due time.
func ReadStats(ctx context.Context, c redis.UniversalClient, key string) (Stats, error) {
	var d Stats
	n, err := c.ZCard(ctx, key).Result()
	if err != nil {
		return d, fmt.Errorf("zcard %s: %w", key, err)
	}
	if d.Size = n; n == 0 {
		return d, nil
	}
	first, err := c.ZRangeWithScores(ctx, key, 0, 0).Result()
	if err != nil {
		return d, fmt.Errorf("zrange %s 0 0: %w", key, err)
	}
	if len(first) > 0 {
		d.NextDue = time.UnixMilli(int64(first[0].Score))
	}
	return d, nil
}
