package redisstream

// The stream, claiming and reclaim kinds and the stream emit, registered with package
// transports: how a source block is decoded and checked (SPEC §2, §5), built, inspected
// and redriven.

import (
	"context"
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/hclutil"
	"github.com/flowrun/flowrun/internal/keyslot"
	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/redisflow"
	"github.com/flowrun/flowrun/transports/streamdlq"
)

// delayAttrs are the pipeline attributes of every stream kind (a reliable list declares the same).
var delayAttrs = []transports.PipelineAttr{
	{AppliesTo: "the stream kind and reliable list sources", Attr: schema.String("delayed_retry").WithDefault(DelayRuntime).Describe(
		"Where `retry_after(d)` copies wait: `\"runtime\"` holds the copy in the process and writes it to the stream when due (a crash before then loses it; a clean stop writes every held copy at once); `\"durable_zset\"` adds it to the sorted set `delay_key`, scored by its due time, and every read first moves due copies back onto the stream with one Lua script.",
	)},
	{AppliesTo: "the stream kind and reliable list sources", Attr: schema.String("delay_key").NonEmpty().DefaultDoc("`\"<stream>" + DelayKeySuffix + "\"`").Describe(
		"The sorted set of `delayed_retry = \"durable_zset\"`; only valid with it. In a Redis Cluster it must hash to the stream's slot (use a `{hash tag}`).",
	)},
}

// pipelineAttrs documents delayed_retry for kind: a claiming or reclaim source takes only
// "runtime" (Decode refuses "durable_zset", since its retry_after keeps the entry pending).
func pipelineAttrs(kind string) []transports.PipelineAttr {
	if kind == KindStream {
		return delayAttrs
	}
	pa := append([]transports.PipelineAttr(nil), delayAttrs...)
	pa[0].Attr = pa[0].Attr.Describe("Only `\"runtime\"` here: a " + kind + " source's `retry_after(d)` keeps the entry pending until it is due, which a crash already survives, so `\"durable_zset\"` is refused.")
	return pa
}

// kindAttrs are the source block's attributes of a stream, claiming or reclaim kind: what the
// reference documents and Decode decodes.
func kindAttrs(kind string) []schema.Attr {
	attrs := []schema.Attr{
		schema.String("stream").NonEmpty().Require().Describe("The stream to read."),
		schema.String("group").NonEmpty().DefaultFrom(schema.FromPipelineName).Describe("The consumer group; created at start (`XGROUP CREATE … MKSTREAM`) when missing."),
		schema.String("consumer").NonEmpty().DefaultFrom(schema.FromHostName).Describe("This process's consumer name in the group; `flowrun run --consumer` overrides it."),
		schema.String("start").WithDefault(DefaultStart).Describe("Where a group that does not exist yet starts: `\"0\"`, the whole backlog, or `\"$\"`, only entries added from now on."),
		schema.Count("batch").WithDefault(DefaultBatch).Describe("Entries asked for per read (`COUNT`); reads never run more than one batch ahead of free handler slots."),
		schema.Duration("block").WithDefault(DefaultBlock).Describe("How long a read blocks waiting for new entries (`BLOCK`)."),
		schema.String("trim").Describe("`\"acked\"`: every 10 s, trim (`XTRIM MINID`) the entries every consumer group of the stream has read and acknowledged. Off when not set."),
		schema.Duration("consumer_ttl").Describe("Delete consumers of the group that have been idle this long and own no pending entries (e.g. `\"24h\"`). Off when not set."),
	}
	if kind != KindStream {
		attrs = append(attrs, schema.Duration("min_idle").Require().
			Describe("How long an entry must sit pending before this consumer takes it over from another (or from a crashed one)."))
	}
	return attrs
}

func init() {
	for i, kind := range []string{KindStream, KindClaiming, KindReclaim} {
		transports.Register(transports.Kind{
			Name:          kind,
			Order:         10 * (i + 1),
			Attrs:         kindAttrs(kind),
			Summary:       kindSummary[kind],
			Doc:           kindDoc[kind],
			Example:       kindExample[kind],
			PipelineAttrs: pipelineAttrs(kind),
			New:           func() transports.Config { return &Config{Options: Options{Kind: kind}} },
		})
	}
	transports.RegisterEmit(transports.EmitKind{
		Name:  "stream",
		Order: 10,
		Redis: true,
		Doc:   "`XADD key * payload … header …`: the payload in the field `payload`, each header a field of its own.",
		Sink:  transports.RedisSink(NewSink),
	})
}

// Config is a stream, claiming or reclaim source block, decoded: the source's Options (the
// pipeline's delayed_retry and delay_key included) and the pipeline's dead-letter stream.
type Config struct {
	redisflow.Reader // its block takes "redis"; flow control keeps its state there
	Options
	DeadLetter string

	streamRange   hcl.Range  // the stream attribute's value
	delayKeyRange *hcl.Range // the delay_key attribute's value; nil when defaulted
}

var (
	_ transports.Config          = (*Config)(nil)
	_ transports.ClusterChecker  = (*Config)(nil)
	_ transports.Inspector       = (*Config)(nil)
	_ transports.DeadLetterStore = (*Config)(nil)
	_ transports.RetryTargeter   = (*Config)(nil)
)

var delayModes = []string{DelayRuntime, DelayDurableZSet}

// Decode reads the source block and the pipeline's delayed_retry and delay_key.
func (c *Config) Decode(b *transports.Block) {
	a, p := b.Values(kindAttrs(c.Kind)), b.PipelineValues(delayAttrs)
	c.Consumer = b.ConsumerName(a)
	c.Batch = a.Int("batch")
	c.Block = a.Duration("block")

	c.Stream = a.String("stream")
	if a.Written("stream") {
		c.streamRange = a.Attr("stream").Expr.Range()
	}
	c.Group = a.String("group")
	if c.Start = a.String("start"); a.OK("start") && c.Start != "0" && c.Start != "$" {
		b.Report(transports.InvalidValue(a.Attr("start"), `"start" must be "0" (the whole backlog) or "$" (only new entries).`))
	}
	if c.Kind != KindStream {
		c.MinIdle = a.Duration("min_idle")
	}
	if c.Trim = a.String("trim"); a.OK("trim") && c.Trim != TrimAcked {
		b.Report(transports.InvalidValue(a.Attr("trim"), `"trim" takes "acked": trim what every group of the stream has read and acknowledged.`))
	}
	c.ConsumerTTL = a.Duration("consumer_ttl")

	c.DelayedRetry = DelayRuntime
	if mode := p.String("delayed_retry"); p.OK("delayed_retry") {
		if mode != DelayRuntime && mode != DelayDurableZSet {
			b.Report(transports.InvalidValue(p.Attr("delayed_retry"), fmt.Sprintf("%q is not a delayed_retry mode.%s It is %s.",
				mode, hclutil.DidYouMean(mode, delayModes), hclutil.QuoteList(delayModes, "or"))))
		} else {
			c.DelayedRetry = mode
		}
		if err := durableKind(c.Kind); mode == DelayDurableZSet && err != nil {
			b.Report(transports.InvalidValue(p.Attr("delayed_retry"), err.Error()+"."))
		}
	}
	if dk := p.Attr("delay_key"); dk != nil {
		c.DelayKey = p.String("delay_key")
		if c.DelayedRetry != DelayDurableZSet {
			b.Report(transports.Unsupported(dk, `"delay_key" is only used with delayed_retry = "durable_zset".`))
		}
		c.delayKeyRange = dk.Expr.Range().Ptr()
	}
	if c.DelayedRetry == DelayDurableZSet && c.DelayKey == "" && c.Stream != "" {
		c.DelayKey = c.Stream + DelayKeySuffix
	}

	c.DeadLetter = b.Pipeline.DeadLetter
	b.RejectDeadLetterKey(c.Stream)
}

// RetryTarget is the durable delay queue that holds retry copies (delayed_retry =
// "durable_zset"), or "" when copies go back to the stream.
func (c *Config) RetryTarget() string {
	if c.DelayedRetry == DelayDurableZSet {
		return c.DelayKey
	}
	return ""
}

// NaturalKey is the stream.
func (c *Config) NaturalKey() string { return c.Stream }

// Capabilities is what the source built from c declares.
func (c *Config) Capabilities() engine.Capabilities { return c.capabilities() }

func (o Options) capabilities() engine.Capabilities {
	if o.Kind == KindStream {
		return engine.Capabilities{Ack: true, DurableDelay: o.DelayedRetry == DelayDurableZSet, Batch: o.Batch}
	}
	return engine.Capabilities{Ack: true, RetryInPlace: true, MinIdle: o.MinIdle, DeliveryCount: true, Batch: o.Batch}
}

// Build returns the source, reading with the client of its redis block.
func (c *Config) Build(_ context.Context, env *transports.Env) (engine.Source, error) {
	return transports.BuildOnClient(env, func(client redis.UniversalClient) (*Source, error) {
		return New(client, c.Options, env.Logger)
	})
}

// CheckCluster: a durable_zset delay queue must share its stream's slot, since one script moves
// copies between them (SPEC §5). The diagnostic points at the attribute to change and names keys
// that would work.
func (c *Config) CheckCluster(redisBlock string) hcl.Diagnostics {
	if c.DelayedRetry != DelayDurableZSet || c.Stream == "" || c.DelayKey == "" {
		return nil
	}
	stream, dk := c.Stream, c.DelayKey
	if keyslot.Of(stream) == keyslot.Of(dk) {
		return nil
	}
	subject := c.streamRange
	if c.delayKeyRange != nil {
		subject = *c.delayKeyRange
	}
	detail := keyslot.DelayQueueDetail(redisBlock, "stream", "stream", stream, dk, c.delayKeyRange != nil)
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Keys in different cluster slots",
		Detail:   detail,
		Subject:  subject.Ptr(),
	}}
}

// Inspect reads the stream's length, its group's lag and pending entries, the delay queue and
// the dead letters.
func (c *Config) Inspect(ctx context.Context, env *transports.Env) (transports.Stats, error) {
	row := transports.Stats{Key: c.Stream, Group: c.Group}
	client, err := env.Client()
	if err != nil {
		return row, err
	}
	st, err := ReadStats(ctx, client, c.Stream, c.Group)
	if err != nil {
		return row, err
	}
	row.Length = &st.Length
	row.Pending = new(int64)
	if st.GroupExists {
		row.Pending = &st.Pending
		if st.Lag >= 0 {
			row.Lag = &st.Lag
		} else {
			row.LagUnknown = true
		}
		row.LagBound = &st.LagBound
		if st.Pending > 0 {
			row.OldestPendingIdle = &st.OldestIdle
		}
	}
	if c.DelayedRetry == DelayDurableZSet && c.DelayKey != "" {
		row.DelayKey = c.DelayKey
		d, err := ReadDelayStats(ctx, client, c.DelayKey)
		if err != nil {
			return row, err
		}
		row.Delayed = &d.Size
		if !d.NextDue.IsZero() {
			row.NextDue = &d.NextDue
		}
	}
	err = row.CountDeadLetters(ctx, c.DeadLetter, client.XLen)
	return row, err
}

// CheckRedrive: a stream's dead letters can always go back to it.
func (c *Config) CheckRedrive() error { return nil }

// ListDeadLetters reads the dead-letter stream (streamdlq.ListDeadLetters).
func (c *Config) ListDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) ([]transports.DeadLetter, int64, error) {
	return streamdlq.Store{Key: c.DeadLetter}.ListDeadLetters(ctx, env, q)
}

// RedriveDeadLetters moves dead letters back onto the stream (streamdlq.Redrive).
func (c *Config) RedriveDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) (int, string, error) {
	client, err := env.Client()
	if err != nil {
		return 0, c.Stream, err
	}
	moved, err := streamdlq.Redrive(ctx, client, c.DeadLetter, c.Stream, q.Limit, q.Match)
	return moved, c.Stream, err
}

// PurgeDeadLetters deletes dead letters from the dead-letter stream (streamdlq.Purge).
func (c *Config) PurgeDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) (int, error) {
	return streamdlq.Store{Key: c.DeadLetter}.PurgeDeadLetters(ctx, env, q)
}
