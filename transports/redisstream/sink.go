package redisstream

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// NewSink returns the sink of `emit "stream"` blocks (SPEC §7): one XADD per message to its Key,
// headers and payload as fields (codec.StreamFields), in order, all in one pipeline. Each XADD
// stands alone: one that fails (WRONGTYPE, NOPERM) does not stop the others, and a failure is
// named per message (engine.SettleError). The client stays the caller's.
func NewSink(client redis.UniversalClient) engine.Sink {
	return redisconn.Sink{Client: client, Name: "redisstream", Write: xadd}
}

func xadd(ctx context.Context, p redis.Pipeliner, stream string, msgs []*engine.Message) redis.Cmder {
	return p.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: "*", Values: codec.StreamFields(msgs[0])})
}
