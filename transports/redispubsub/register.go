package redispubsub

// The pubsub kind and the pubsub emit, registered with package transports: how a source block is
// decoded and checked (SPEC §2), built, inspected and redriven.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/redisflow"
	// Dead letters of a Pub/Sub source are stream entries (SPEC §5): flowrun dlq reads and
	// deletes them with the same tools as the stream sources'.
	"github.com/flowrun/flowrun/transports/streamdlq"
)

// pubsubAttrs and pubsubPipelineAttrs are the pubsub source block's attributes and the
// pipeline's that only a pubsub source takes: what the reference documents and Decode decodes.
var (
	pubsubAttrs = []schema.Attr{
		schema.Strings("channels").Describe("The channels to `SUBSCRIBE` to. A pubsub source takes `channels` or `patterns`, exactly one of them."),
		schema.Strings("patterns").Describe("The glob-style patterns to `PSUBSCRIBE` to (`\"orders.*\"`), instead of `channels`."),
	}
	pubsubPipelineAttrs = []transports.PipelineAttr{{AppliesTo: `a pubsub source with "patterns"`, Attr: schema.String("retry_to").NonEmpty().Describe(
		"The channel retry copies are published to, for a source with `patterns` (a copy cannot go back to a pattern); required there when the pipeline can retry. A source with `channels` publishes copies back to the channel they came from.",
	)}}
)

func init() {
	transports.Register(transports.Kind{
		Name:          "pubsub",
		Order:         50,
		Attrs:         pubsubAttrs,
		PipelineAttrs: pubsubPipelineAttrs,
		Summary:       "Redis Pub/Sub channels or patterns (at most once)",
		Doc:           pubsubDoc,
		Example:       pubsubExample,
		New:           func() transports.Config { return &Config{} },
	})
	transports.RegisterEmit(transports.EmitKind{
		Name:  "pubsub",
		Order: 30,
		Redis: true,
		Doc:   "`PUBLISH key`: an envelope `{\"payload\":…,\"headers\":{…}}` when the message has headers, else the bare payload.",
		Sink:  transports.RedisSink(NewSink),
	})
}

// Config is a pubsub source block, decoded: the source's Options (the pipeline's retry_to
// included) and the pipeline's dead-letter stream.
type Config struct {
	redisflow.Reader // its block takes "redis"; flow control keeps its state there
	Options
	DeadLetter string
}

var (
	_ transports.Config          = (*Config)(nil)
	_ transports.Inspector       = (*Config)(nil)
	_ transports.DeadLetterStore = (*Config)(nil)
)

// Decode reads the source block (channels or patterns) and the pipeline's retry_to, required
// with patterns when the pipeline can retry.
func (c *Config) Decode(b *transports.Block) {
	a, p := b.Values(pubsubAttrs), b.PipelineValues(pubsubPipelineAttrs)
	ch, pa := a.Attr("channels"), a.Attr("patterns")
	b.OneOf(ch, pa,
		`A pubsub source takes "channels" or "patterns", not both.`,
		`A pubsub source needs "channels" or "patterns" (a list).`)
	c.Channels = a.Strings("channels")
	c.Patterns = a.Strings("patterns")

	patterns := len(c.Patterns) > 0
	r := p.Attr("retry_to")
	if r != nil {
		c.RetryTo = p.String("retry_to")
		if !patterns {
			b.Report(transports.Unsupported(r, `"retry_to" only applies to a pubsub source with "patterns"; this pubsub source reads channels, and copies go back to the channel they came from.`))
		}
	}
	if r == nil && patterns && b.Pipeline.CanRetry {
		b.Report(transports.MissingArgument(b.Pipeline.DefRange, "retry_to",
			"for a pipeline that reads pubsub patterns and can retry (the channel retry copies are published to)"))
	}
	c.DeadLetter = b.Pipeline.DeadLetter
}

// NaturalKey is the only channel ("" for several, or for patterns).
func (c *Config) NaturalKey() string {
	if len(c.Channels) == 1 {
		return c.Channels[0]
	}
	return ""
}

// Capabilities: Pub/Sub has no acknowledgement.
func (c *Config) Capabilities() engine.Capabilities { return engine.Capabilities{} }

// Build returns the source, subscribing with the client of its redis block.
func (c *Config) Build(_ context.Context, env *transports.Env) (engine.Source, error) {
	return transports.BuildOnClient(env, func(client redis.UniversalClient) (*Source, error) {
		return New(client, c.Options, env.Logger)
	})
}

// names is what the source subscribes to, comma-separated.
func (c *Config) names() string {
	if len(c.Patterns) > 0 {
		return strings.Join(c.Patterns, ",")
	}
	return strings.Join(c.Channels, ",")
}

// Inspect: Redis keeps nothing of a channel; only the dead letters have a count.
func (c *Config) Inspect(ctx context.Context, env *transports.Env) (transports.Stats, error) {
	row := transports.Stats{Key: c.names()}
	if c.DeadLetter == "" {
		return row, nil
	}
	client, err := env.Client()
	if err != nil {
		return row, err
	}
	err = row.CountDeadLetters(ctx, c.DeadLetter, client.XLen)
	return row, err
}

// CheckRedrive: under patterns, dead letters go to retry_to, which must be set.
func (c *Config) CheckRedrive() error {
	if len(c.Patterns) > 0 && c.RetryTo == "" {
		return errors.New("subscribes to patterns and has no retry_to: no channel to publish its dead letters to")
	}
	return nil
}

// ListDeadLetters reads the dead-letter stream.
func (c *Config) ListDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) ([]transports.DeadLetter, int64, error) {
	return streamdlq.Store{Key: c.DeadLetter}.ListDeadLetters(ctx, env, q)
}

// PurgeDeadLetters deletes dead letters from the dead-letter stream.
func (c *Config) PurgeDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) (int, error) {
	return streamdlq.Store{Key: c.DeadLetter}.PurgeDeadLetters(ctx, env, q)
}

// RedriveDeadLetters publishes dead letters back to their channels: x-original-key, or retry_to
// under patterns, one PUBLISH per letter, and deletes each letter only once a subscriber
// received it. A PUBLISH that reaches nobody is lost, so it stops there and the letter stays. In
// a Redis Cluster PUBLISH counts only the receivers on the node that took it, so there the count
// is not checked. The target it returns is the channels it published to, sorted.
func (c *Config) RedriveDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) (int, string, error) {
	target := c.names()
	if len(c.Patterns) > 0 {
		target = c.RetryTo
	}
	client, err := env.Client()
	if err != nil {
		return 0, target, err
	}
	_, cluster := client.(*redis.ClusterClient)
	used := map[string]bool{}
	moved, err := streamdlq.RedriveWith(ctx, client, c.DeadLetter, q.Limit, q.Match, func(ctx context.Context, batch []streamdlq.DeadLetter) (int, error) {
		for i, dl := range batch {
			ch := c.RetryTo
			if len(c.Patterns) == 0 {
				ch = dl.Message.Headers[engine.HeaderOriginalKey]
				if ch == "" && len(c.Channels) == 1 {
					ch = c.Channels[0]
				}
			}
			if ch == "" {
				return i, fmt.Errorf("dead letter %s has no %s header, and the pipeline reads %d channels: cannot tell where it goes", dl.Message.ID, engine.HeaderOriginalKey, len(c.Channels))
			}
			n, err := client.Publish(ctx, ch, codec.EncodeEnvelope(streamdlq.RedriveCopy(dl.Message))).Result()
			if err != nil {
				return i, fmt.Errorf("publish %s: %w", ch, err)
			}
			if n == 0 && !cluster {
				return i, fmt.Errorf("no subscriber on channel %s: a message published now would be lost, so dead letter %s and the ones after it were left in %s; start the pipeline and redrive again", ch, dl.Message.ID, c.DeadLetter)
			}
			used[ch] = true
		}
		return len(batch), nil
	})
	if len(used) > 0 {
		chans := make([]string, 0, len(used))
		for ch := range used {
			chans = append(chans, ch)
		}
		slices.Sort(chans)
		target = strings.Join(chans, ",")
	}
	return moved, target, err
}
