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

// xadd queues the XADD of msgs[0], its arguments laid out at once (codec.AppendStreamArgs).
func xadd(ctx context.Context, p redis.Pipeliner, stream string, msgs []*engine.Message) redis.Cmder {
	m := msgs[0]
	args := make([]any, 3, 3+2*len(m.Headers)+2)
	args[0], args[1], args[2] = "xadd", stream, "*"
	return p.Do(ctx, codec.AppendStreamArgs(args, m)...)
}
