package redisstream

import (
	"context"

	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/streamdlq"
)

var _ transports.DeadLetterPager = (*Config)(nil)

// PageDeadLetters reads one page of the dead-letter stream (streamdlq.PageDeadLetters).
func (c *Config) PageDeadLetters(ctx context.Context, env *transports.Env, newest bool, offset, limit int) ([]transports.DeadLetter, int64, error) {
	return streamdlq.Store{Key: c.DeadLetter}.PageDeadLetters(ctx, env, newest, offset, limit)
}
