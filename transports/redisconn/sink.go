package redisconn

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
)

// Sink is the emit sink of every Redis kind (emit "stream", "list", "pubsub"; SPEC §7): each
// message is written by one command to its Key, or, with Runs, each run of consecutive messages
// to one key by one command (LPUSH key v1 v2 …), all in one pipeline, in order. Each command
// stands alone: one that fails (WRONGTYPE, NOPERM) does not stop the others. A failure is named
// per message (engine.SettleError); when the connection breaks, every message of the pipeline is
// named, though some may have been written. The client stays the caller's.
type Sink struct {
	Client redis.UniversalClient
	// Name prefixes the error for a message without a key ("redislist").
	Name string
	// Write adds to p the command that writes msgs, every one of them to key.
	Write func(ctx context.Context, p redis.Pipeliner, key string, msgs []*engine.Message) redis.Cmder
	// Runs: one command per run of messages to one key; otherwise one per message.
	Runs bool
}

var _ engine.Sink = Sink{}

// Publish implements engine.Sink.
func (k Sink) Publish(ctx context.Context, msgs ...*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pipe := k.Client.Pipeline()
	var (
		cmds   = make([]redis.Cmder, 0, len(msgs))
		owners [][]int // nil: command j wrote message j
	)
	for i := 0; i < len(msgs); {
		key := msgs[i].Key
		if key == "" {
			return errors.New(k.Name + ": emit without a key")
		}
		j := i + 1
		if k.Runs {
			for j < len(msgs) && msgs[j].Key == key {
				j++
			}
			own := make([]int, j-i)
			for n := range own {
				own[n] = i + n
			}
			owners = append(owners, own)
		}
		cmds = append(cmds, k.Write(ctx, pipe, key, msgs[i:j]))
		i = j
	}
	return ExecFaults(ctx, k.Client, pipe, cmds, owners)
}
