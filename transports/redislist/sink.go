package redislist

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// sink writes emitted messages to lists.
type sink struct {
	client redis.UniversalClient
}

// NewSink returns the sink of `emit "list"` blocks: each message is LPUSHed, as an envelope when
// it has headers, onto the list named by its Key. The caller owns client.
func NewSink(client redis.UniversalClient) engine.Sink { return sink{client: client} }

// Publish LPUSHes msgs in order, one LPUSH per run of messages to one key, all in one pipeline.
func (k sink) Publish(ctx context.Context, msgs ...*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pipe := k.client.Pipeline()
	var cmds []*redis.IntCmd
	for i := 0; i < len(msgs); {
		key := msgs[i].Key
		if key == "" {
			return errors.New("redislist: emit without a key")
		}
		var vals []any
		for ; i < len(msgs) && msgs[i].Key == key; i++ {
			vals = append(vals, codec.EncodeEnvelope(msgs[i]))
		}
		cmds = append(cmds, pipe.LPush(ctx, key, vals...))
	}
	return redisconn.ExecWrites(ctx, k.client, pipe, cmds, "redislist: lpush")
}
