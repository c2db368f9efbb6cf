package redislist

// The list kind and the list emit, registered with package transports: how a source block is
// decoded and checked (SPEC §2, §5), built, inspected and redriven.

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
)

// delayAttrs are the stream kinds' delayed_retry and delay_key, which a reliable list takes too.
var delayAttrs = []transports.PipelineAttr{
	{AppliesTo: delayAppliesTo, Attr: schema.String("delayed_retry").WithDefault(DelayRuntime).Describe(
		"Where `retry_after(d)` copies wait: `\"runtime\"` holds the copy in the process and pushes it to the list when due (a crash before then loses it; a clean stop pushes every held copy at once); `\"durable_zset\"` (a reliable list only) adds it to the sorted set `delay_key`, scored by its due time, and removes the element from the processing list in one Lua script, and reads move due copies back onto the list with another (when a copy this process knows of is due, and at least once a second), so a crash loses nothing.",
	)},
	{AppliesTo: delayAppliesTo, Attr: schema.String("delay_key").NonEmpty().DefaultDoc("`\"<key>" + DelayKeySuffix + "\"`").Describe(
		"The sorted set of `delayed_retry = \"durable_zset\"`; only valid with it. In a Redis Cluster it must hash to `key`'s slot (use a `{hash tag}`).",
	)},
}

// listAttrs are the list source block's attributes: what the reference documents and Decode
// decodes.
var listAttrs = []schema.Attr{
	schema.String("key").NonEmpty().Require().Describe("The list to read."),
	schema.Bool("reliable").WithDefault(true).Describe("`true`: each element is moved to a processing list as it is read (`BLMOVE`) and removed from it once settled, so a crash loses no element (nor a `retry_after` copy with `delayed_retry = \"durable_zset\"`; see \"What a crash costs\" below); `false`: `BRPOP`, at most once."),
	schema.String("consumer").NonEmpty().DefaultFrom(schema.FromHostName).Describe("This process's name; it names the default processing list. `flowrun run --consumer` overrides it."),
	schema.String("processing").NonEmpty().DefaultDoc("`\"<key>:processing:<consumer>\"`").Describe("A reliable list's processing list; only valid with `reliable = true`. Give each process its own. In a Redis Cluster it must hash to `key`'s slot (use a `{hash tag}`)."),
	schema.Count("batch").WithDefault(DefaultBatch).Describe("Elements taken per read at most."),
	schema.Duration("block").WithDefault(DefaultBlock).Describe("How long a read blocks waiting for an element."),
}

// delayAppliesTo is the stream kind's wording (the first kind's is shown), so it is the same.
const delayAppliesTo = "the stream kind and reliable list sources"

var delayModes = []string{DelayRuntime, DelayDurableZSet}

func init() {
	transports.Register(transports.Kind{
		Name:          "list",
		Order:         40,
		Attrs:         listAttrs,
		Summary:       "a Redis list, reliable (`BLMOVE` to a processing list) or simple (`BRPOP`)",
		Doc:           listDoc,
		Example:       listExample,
		PipelineAttrs: delayAttrs,
		New:           func() transports.Config { return &Config{} },
	})
	transports.RegisterEmit(transports.EmitKind{
		Name:  "list",
		Order: 20,
		Redis: true,
		Doc:   "`LPUSH key`: an envelope `{\"payload\":…,\"headers\":{…}}` when the message has headers, else the bare payload.",
		Sink:  transports.RedisSink(NewSink),
	})
}

// Config is a list source block, decoded: the source's Options and the pipeline's dead-letter
// list.
type Config struct {
	redisflow.Reader // its block takes "redis"; flow control keeps its state there
	Options
	DeadLetter string

	keyRange        hcl.Range  // the key attribute's value
	processingRange *hcl.Range // the processing attribute's value; nil when defaulted
	delayKeyRange   *hcl.Range // the delay_key attribute's value; nil when defaulted
}

var (
	_ transports.Config          = (*Config)(nil)
	_ transports.ClusterChecker  = (*Config)(nil)
	_ transports.Inspector       = (*Config)(nil)
	_ transports.DeadLetterStore = (*Config)(nil)
	_ transports.RetryTargeter   = (*Config)(nil)
)

// Decode reads the source block; a reliable list's processing list defaults to
// "<key>:processing:<consumer>".
func (c *Config) Decode(b *transports.Block) {
	a := b.Values(listAttrs)
	c.Consumer = b.ConsumerName(a)
	c.Batch = a.Int("batch")
	c.Block = a.Duration("block")

	c.Key = a.String("key")
	if a.Written("key") {
		c.keyRange = a.Attr("key").Expr.Range()
	}
	c.Reliable = a.Bool("reliable")
	p := a.Attr("processing")
	if p != nil {
		c.Processing = a.String("processing")
		if !c.Reliable {
			b.Report(transports.Unsupported(p, `"processing" is only used by a reliable list (reliable = true).`))
		}
	}
	switch {
	case p != nil && !c.Reliable:
		c.Processing = ""
	case p == nil && c.Reliable && c.Key != "":
		c.Processing = fmt.Sprintf("%s:processing:%s", c.Key, c.Consumer)
	case p != nil:
		c.processingRange = p.Expr.Range().Ptr()
	}

	c.decodeDelay(b)
	c.DeadLetter = b.Pipeline.DeadLetter
	b.RejectDeadLetterKey(c.Key)
}

// decodeDelay reads the pipeline's delayed_retry and delay_key: durable_zset needs a reliable
// list, whose processing list is what makes moving the element into the delay queue atomic.
func (c *Config) decodeDelay(b *transports.Block) {
	p := b.PipelineValues(delayAttrs)
	c.DelayedRetry = DelayRuntime
	if mode := p.String("delayed_retry"); p.OK("delayed_retry") {
		switch {
		case mode != DelayRuntime && mode != DelayDurableZSet:
			b.Report(transports.InvalidValue(p.Attr("delayed_retry"), fmt.Sprintf("%q is not a delayed_retry mode.%s It is %s.",
				mode, hclutil.DidYouMean(mode, delayModes), hclutil.QuoteList(delayModes, "or"))))
		case mode == DelayDurableZSet && !c.Reliable:
			b.Report(transports.InvalidValue(p.Attr("delayed_retry"), `delayed_retry = "durable_zset" needs a reliable list (reliable = true): a simple list has no processing list to move the element out of atomically.`))
		default:
			c.DelayedRetry = mode
		}
	}
	if dk := p.Attr("delay_key"); dk != nil {
		c.DelayKey = p.String("delay_key")
		if c.DelayedRetry != DelayDurableZSet {
			b.Report(transports.Unsupported(dk, `"delay_key" is only used with delayed_retry = "durable_zset".`))
		}
		c.delayKeyRange = dk.Expr.Range().Ptr()
		if c.DelayKey == c.Key || c.DelayKey == c.Processing {
			b.Report(transports.InvalidValue(dk, `"delay_key" must differ from the list and its processing list.`))
		}
	}
	if c.DelayedRetry == DelayDurableZSet && c.DelayKey == "" && c.Key != "" {
		c.DelayKey = c.Key + DelayKeySuffix
	}
}

// RetryTarget is the durable delay queue that holds retry_after copies (durable_zset), or ""
// when copies go back to the list.
func (c *Config) RetryTarget() string {
	if c.DelayedRetry == DelayDurableZSet {
		return c.DelayKey
	}
	return ""
}

// NaturalKey is the list's key.
func (c *Config) NaturalKey() string { return c.Key }

// Capabilities: a reliable list acknowledges (LREM), and with durable_zset stores delays; a
// simple list has nothing to settle.
func (c *Config) Capabilities() engine.Capabilities { return c.capabilities() }

// Build returns the source, reading with the client of its redis block.
func (c *Config) Build(_ context.Context, env *transports.Env) (engine.Source, error) {
	return transports.BuildOnClient(env, func(client redis.UniversalClient) (*Source, error) {
		return New(client, c.Options, env.Logger)
	})
}

// CheckCluster: a reliable list's processing list must share its key's slot, since BLMOVE moves
// elements between them. The diagnostic points at the attribute to change and names keys that
// would work.
func (c *Config) CheckCluster(redisBlock string) hcl.Diagnostics {
	if !c.Reliable || c.Key == "" || c.Processing == "" {
		return nil
	}
	return append(c.checkProcessingSlot(redisBlock), c.checkDelaySlot(redisBlock)...)
}

// checkDelaySlot: a durable_zset delay queue must share the list's slot, since one script moves
// copies between them (and another between it and the processing list).
func (c *Config) checkDelaySlot(redisBlock string) hcl.Diagnostics {
	key, dk := c.Key, c.DelayKey
	if c.DelayedRetry != DelayDurableZSet || dk == "" || keyslot.Of(key) == keyslot.Of(dk) {
		return nil
	}
	subject := c.keyRange
	if c.delayKeyRange != nil {
		subject = *c.delayKeyRange
	}
	detail := keyslot.DelayQueueDetail(redisBlock, "list", "key", key, dk, c.delayKeyRange != nil)
	return hcl.Diagnostics{slotDiag(subject, detail)}
}

// checkProcessingSlot: the processing list must share the list's slot (BLMOVE).
func (c *Config) checkProcessingSlot(redisBlock string) hcl.Diagnostics {
	cluster := fmt.Sprintf("The redis block %q is a Redis Cluster", redisBlock)
	key, p := c.Key, c.Processing
	if c.processingRange == nil {
		// The default "<key>:processing:<consumer>" shares key's tag, and without a tag it
		// shares key's slot only by chance, for some consumer names.
		if _, ok := keyslot.HashTag(key); ok {
			return nil
		}
		detail := fmt.Sprintf("%s, and a reliable list's processing list must be in the slot of its key (BLMOVE moves elements between them), but key %q has no hash tag, and its default processing list %q holds the consumer name, so the two share a slot only by chance. ",
			cluster, key, p)
		detail += keyslot.SuggestPair(key, p, "key", "processing", false)
		return hcl.Diagnostics{slotDiag(c.keyRange, detail)}
	}
	if keyslot.Of(key) == keyslot.Of(p) {
		return nil
	}
	detail := fmt.Sprintf("%s, and a reliable list's processing list must be in the slot of its key (BLMOVE moves elements between them), but key %q is in slot %d and processing %q in slot %d. ",
		cluster, key, keyslot.Of(key), p, keyslot.Of(p))
	detail += keyslot.SuggestPair(key, p, "key", "processing", true)
	return hcl.Diagnostics{slotDiag(*c.processingRange, detail)}
}

func slotDiag(subject hcl.Range, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Keys in different cluster slots",
		Detail:   detail,
		Subject:  subject.Ptr(),
	}
}

// Inspect reads the list's length, a reliable list's processing list (its pending deliveries)
// and the dead letters.
func (c *Config) Inspect(ctx context.Context, env *transports.Env) (transports.Stats, error) {
	row := transports.Stats{Key: c.Key}
	client, err := env.Client()
	if err != nil {
		return row, err
	}
	n, err := client.LLen(ctx, c.Key).Result()
	if err != nil {
		return row, fmt.Errorf("llen %s: %w", c.Key, err)
	}
	row.Length = &n
	if c.Reliable && c.Processing != "" {
		row.Processing = c.Processing
		n, err := client.LLen(ctx, c.Processing).Result()
		if err != nil {
			return row, fmt.Errorf("llen %s: %w", c.Processing, err)
		}
		row.Pending = &n
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
	err = row.CountDeadLetters(ctx, c.DeadLetter, client.LLen)
	return row, err
}

// CheckRedrive: a list's dead letters can always go back to it.
func (c *Config) CheckRedrive() error { return nil }

// ListDeadLetters reads the dead-letter list, oldest (tail) first.
func (c *Config) ListDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) ([]transports.DeadLetter, int64, error) {
	client, err := env.Client()
	if err != nil {
		return nil, 0, err
	}
	var (
		dls   []DeadLetter
		total int64
	)
	if q.Match != nil {
		dls, total, err = Scan(ctx, client, c.DeadLetter, q.Limit, q.Match)
	} else {
		dls, err = ReadDeadLetters(ctx, client, c.DeadLetter, q.Limit)
	}
	if err != nil {
		return nil, 0, err
	}
	out := make([]transports.DeadLetter, len(dls))
	for i, dl := range dls {
		out[i] = transports.DeadLetter{Message: dl.Message}
	}
	if q.Match != nil {
		return out, total, nil
	}
	total, err = client.LLen(ctx, c.DeadLetter).Result()
	if err != nil {
		return out, 0, fmt.Errorf("llen %s: %w", c.DeadLetter, err)
	}
	return out, total, nil
}

// RedriveDeadLetters moves dead letters back onto the list (Redrive).
func (c *Config) RedriveDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) (int, string, error) {
	client, err := env.Client()
	if err != nil {
		return 0, c.Key, err
	}
	moved, err := Redrive(ctx, client, c.DeadLetter, c.Key, q.Limit, q.Match)
	return moved, c.Key, err
}

// PurgeDeadLetters deletes dead letters from the dead-letter list (Purge).
func (c *Config) PurgeDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) (int, error) {
	client, err := env.Client()
	if err != nil {
		return 0, err
	}
	return Purge(ctx, client, c.DeadLetter, q.Limit, q.Match)
}
