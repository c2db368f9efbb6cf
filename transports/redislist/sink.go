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

// Publish LPUSHes msgs in order, one LPUSH per run of messages to one key, all in one pipeline;
// a failure names the messages of the LPUSH that failed (engine.SettleError).
func (k sink) Publish(ctx context.Context, msgs ...*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pipe := k.client.Pipeline()
	var (
		cmds   []*redis.IntCmd
		owners [][]int
	)
	for i := 0; i < len(msgs); {
		key := msgs[i].Key
		if key == "" {
			return errors.New("redislist: emit without a key")
		}
		var (
			vals []any
			own  []int
		)
		for ; i < len(msgs) && msgs[i].Key == key; i++ {
			vals, own = append(vals, codec.EncodeEnvelope(msgs[i])), append(own, i)
		}
		cmds, owners = append(cmds, pipe.LPush(ctx, key, vals...)), append(owners, own)
	}
	return redisconn.ExecFaults(ctx, k.client, pipe, cmds, owners)
}
