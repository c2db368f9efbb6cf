package redisstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/transports"
)

var _ transports.DeadLetterPager = (*Config)(nil)

// PageDeadLetters reads one page of the dead-letter stream (PageDeadLetters of the package).
func (c *Config) PageDeadLetters(ctx context.Context, env *transports.Env, newest bool, offset, limit int) ([]transports.DeadLetter, int64, error) {
	client, err := env.Client()
	if err != nil {
		return nil, 0, err
	}
	return PageDeadLetters(ctx, client, c.DeadLetter, newest, offset, limit)
}

// PageDeadLetters skips offset entries of the dead-letter stream key and returns up to limit of
// the next, from the newest end (XREVRANGE) or the oldest (XRANGE), and the stream's length.
func PageDeadLetters(ctx context.Context, c redis.UniversalClient, key string, newest bool, offset, limit int) ([]transports.DeadLetter, int64, error) {
	total, err := c.XLen(ctx, key).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("redisstream: xlen %s: %w", key, err)
	}
	if limit <= 0 || int64(offset) >= total {
		return nil, total, nil
	}
	n := int64(offset + limit)
	var xs []redis.XMessage
	if newest {
		xs, err = c.XRevRangeN(ctx, key, "+", "-", n).Result()
	} else {
		xs, err = c.XRangeN(ctx, key, "-", "+", n).Result()
	}
	if err != nil {
		return nil, total, fmt.Errorf("redisstream: xrange %s: %w", key, err)
	}
	if offset >= len(xs) {
		return nil, total, nil
	}
	dls := deadLetters(key, xs[offset:])
	out := make([]transports.DeadLetter, len(dls))
	for i, dl := range dls {
		out[i] = transports.DeadLetter{ID: dl.Message.ID, Message: dl.Message}
	}
	return out, total, nil
}
