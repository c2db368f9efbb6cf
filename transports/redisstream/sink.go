package redisstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// sink writes emitted messages to streams (emit "stream", SPEC §7): one XADD per message to its
// Key, headers and payload as fields (Fields), all in one pipeline.
type sink struct{ client redis.UniversalClient }

// NewSink returns a stream sink on client, which stays the caller's.
func NewSink(client redis.UniversalClient) engine.Sink { return sink{client: client} }

// Publish sends one XADD per message, in order, in one pipeline. Each XADD stands alone: one
// that fails (WRONGTYPE, NOPERM) does not stop the others, so on a partial failure messages
// before and after a failed one are written; when the connection breaks, whether the rest were
// is unknown. The error counts the failed XADDs and names their keys.
func (k sink) Publish(ctx context.Context, msgs ...*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	for _, m := range msgs {
		if m.Key == "" {
			return errors.New("redisstream: emit without a key")
		}
	}
	cmds, err := k.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range msgs {
			p.XAdd(ctx, &redis.XAddArgs{Stream: m.Key, ID: "*", Values: Fields(m)})
		}
		return nil
	})
	if err == nil {
		return nil
	}
	var errs []error
	for i, c := range cmds {
		if c.Err() != nil {
			errs = append(errs, fmt.Errorf("xadd %s: %w", msgs[i].Key, c.Err()))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, err)
	}
	return redisconn.RedactError(fmt.Errorf("redisstream: emit: %d of %d failed: %w",
		len(errs), len(msgs), errors.Join(errs...)), redisconn.SecretsOf(k.client)...)
}
