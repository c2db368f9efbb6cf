package redisstream

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// sink writes emitted messages to streams (emit "stream", SPEC §7): one XADD per message to its
// Key, headers and payload as fields (codec.StreamFields), all in one pipeline.
type sink struct{ client redis.UniversalClient }

// NewSink returns a stream sink on client, which stays the caller's.
func NewSink(client redis.UniversalClient) engine.Sink { return sink{client: client} }

// Publish sends one XADD per message, in order, in one pipeline. Each XADD stands alone: one
// that fails (WRONGTYPE, NOPERM) does not stop the others. A failure is named per message
// (engine.SettleError); when the connection breaks, every message of the pipeline is named,
// though some may have been written.
func (k sink) Publish(ctx context.Context, msgs ...*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pipe := k.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	for i, m := range msgs {
		if m.Key == "" {
			return errors.New("redisstream: emit without a key")
		}
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: m.Key, ID: "*", Values: codec.StreamFields(m)})
	}
	return redisconn.ExecFaults(ctx, k.client, pipe, cmds, nil)
}
