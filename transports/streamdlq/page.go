package streamdlq

// The reads behind transports.DeadLetterStore's list and transports.DeadLetterPager, for every
// source whose dead letters are a stream.

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/transports"
)

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

// ListDeadLetters reads up to q.Limit entries (0: all) of the dead-letter stream key that q
// selects, oldest first, and how many it selects (the stream's length without q.Match):
// `flowrun dlq list` of every source whose dead letters are a stream.
func ListDeadLetters(ctx context.Context, c redis.UniversalClient, key string, q transports.DeadLetterQuery) ([]transports.DeadLetter, int64, error) {
	var (
		dls   []DeadLetter
		total int64
		err   error
	)
	if q.Match != nil {
		dls, total, err = Scan(ctx, c, key, q.Limit, q.Match)
	} else {
		dls, err = ReadDeadLetters(ctx, c, key, q.Limit)
	}
	if err != nil {
		return nil, 0, err
	}
	out := make([]transports.DeadLetter, len(dls))
	for i, dl := range dls {
		out[i] = transports.DeadLetter{ID: dl.Message.ID, Message: dl.Message}
	}
	if q.Match != nil {
		return out, total, nil
	}
	total, err = c.XLen(ctx, key).Result()
	if err != nil {
		return out, 0, fmt.Errorf("xlen %s: %w", key, err)
	}
	return out, total, nil
}
