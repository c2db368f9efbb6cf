package redislist

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// NewSink returns the sink of `emit "list"` blocks: the messages are LPUSHed in order, as
// envelopes when they have headers, onto the lists named by their Keys, one LPUSH per run of
// messages to one key, all in one pipeline; a failure names the messages of the LPUSH that
// failed (engine.SettleError). The caller owns client.
func NewSink(client redis.UniversalClient) engine.Sink {
	return redisconn.Sink{Client: client, Name: "redislist", Runs: true, Write: lpushRun}
}

func lpushRun(ctx context.Context, p redis.Pipeliner, key string, msgs []*engine.Message) redis.Cmder {
	vals := make([]any, len(msgs))
	for i, m := range msgs {
		vals[i] = codec.EncodeEnvelope(m)
	}
	return p.LPush(ctx, key, vals...)
}
