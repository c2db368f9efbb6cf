package redispubsub

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// sink publishes emitted messages.
type sink struct {
	client redis.UniversalClient
}

// NewSink returns the sink of `emit "pubsub"` blocks: each message is PUBLISHed, as an envelope
// when it has headers, to the channel named by its Key. The caller owns client.
func NewSink(client redis.UniversalClient) engine.Sink { return sink{client: client} }

// Publish PUBLISHes msgs in order, pipelined. A message nobody is subscribed to is not an error
// (Pub/Sub keeps nothing). A failure is named per message (engine.SettleError).
func (k sink) Publish(ctx context.Context, msgs ...*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pipe := k.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(msgs))
	for i, m := range msgs {
		if m.Key == "" {
			return errors.New("redispubsub: emit without a channel")
		}
		cmds[i] = pipe.Publish(ctx, m.Key, codec.EncodeEnvelope(m))
	}
	return redisconn.ExecFaults(ctx, k.client, pipe, cmds, nil)
}
