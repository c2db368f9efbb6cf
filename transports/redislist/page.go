package redislist

import (
	"context"
	"fmt"

	"github.com/flowrun/flowrun/transports"
)

var _ transports.DeadLetterPager = (*Config)(nil)

// PageDeadLetters skips offset elements of the dead-letter list and returns up to limit of the
// next, and the list's length. Dead letters are pushed at the head, so the newest end is the
// head: one LRANGE of just the page either way.
func (c *Config) PageDeadLetters(ctx context.Context, env *transports.Env, newest bool, offset, limit int) ([]transports.DeadLetter, int64, error) {
	client, err := env.Client()
	if err != nil {
		return nil, 0, err
	}
	total, err := client.LLen(ctx, c.DeadLetter).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("redislist: llen %s: %w", c.DeadLetter, err)
	}
	if limit <= 0 || int64(offset) >= total {
		return nil, total, nil
	}
	start, stop := int64(offset), int64(offset+limit-1) // head to tail: newest first
	if !newest {
		start, stop = -int64(offset+limit), -int64(offset+1)
	}
	els, err := client.LRange(ctx, c.DeadLetter, start, stop).Result()
	if err != nil {
		return nil, total, fmt.Errorf("redislist: lrange %s: %w", c.DeadLetter, err)
	}
	dls := deadLetters(c.DeadLetter, els) // oldest first
	out := make([]transports.DeadLetter, len(dls))
	for i, dl := range dls {
		j := i
		if newest {
			j = len(dls) - 1 - i
		}
		out[j] = transports.DeadLetter{Message: dl.Message}
	}
	return out, total, nil
}
