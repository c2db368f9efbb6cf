package redispubsub

import (
	"context"

	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/streamdlq"
)

var _ transports.DeadLetterPager = (*Config)(nil)

// PageDeadLetters reads one page of the dead-letter stream.
func (c *Config) PageDeadLetters(ctx context.Context, env *transports.Env, newest bool, offset, limit int) ([]transports.DeadLetter, int64, error) {
	client, err := env.Client()
	if err != nil {
		return nil, 0, err
	}
	return streamdlq.PageDeadLetters(ctx, client, c.DeadLetter, newest, offset, limit)
}
