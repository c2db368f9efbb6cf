package redispubsub

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// NewSink returns the sink of `emit "pubsub"` blocks: each message is PUBLISHed, as an envelope
// when it has headers, to the channel named by its Key, in order, pipelined. A message nobody is
// subscribed to is not an error (Pub/Sub keeps nothing). A failure is named per message
// (engine.SettleError). The caller owns client.
func NewSink(client redis.UniversalClient) engine.Sink {
	return redisconn.Sink{Client: client, Name: "redispubsub", Write: publishOne}
}

func publishOne(ctx context.Context, p redis.Pipeliner, channel string, msgs []*engine.Message) redis.Cmder {
	return p.Publish(ctx, channel, codec.EncodeEnvelope(msgs[0]))
}
