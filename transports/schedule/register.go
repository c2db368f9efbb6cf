package schedule

// The schedule kind, registered with package transports: how a source block is decoded and
// checked (SPEC §17), built and inspected, and where its dead letters are.

import (
	"context"
	"errors"
	"fmt"
	"time"
	// A zone named in timezone must load wherever flowrun runs, a container without
	// /usr/share/zoneinfo too: the binary carries the zone database (about 450 kB).
	_ "time/tzdata"

	"github.com/hashicorp/hcl/v2"
	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/redisflow"
	// Dead letters of a schedule source are stream entries: flowrun dlq reads and deletes them
	// with the stream sources' tools.
	"github.com/flowrun/flowrun/transports/streamdlq"
)

// scheduleAttrs are the schedule source block's attributes: what the reference documents and
// Decode decodes.
var scheduleAttrs = []schema.Attr{
	schema.String("cron").NonEmpty().Describe("A standard cron expression of five fields: minute, hour, day of month, month, day of week (`\"0 2 * * *\"`: 02:00 every day; `\"*/15 9-17 * * 1-5\"`). A schedule source takes `cron` or `every`, exactly one."),
	schema.Duration("every").Describe("A fixed interval of at least 1s instead of `cron` (`\"30s\"`, `\"1h\"`): the ticks are whole multiples of it counted from the Unix epoch, so `\"1h\"` ticks on the hour and every process ticks at the same instants."),
	schema.String("timezone").NonEmpty().DefaultDoc("`\"UTC\"`").Describe("The IANA time zone `cron` is read in (`\"Europe/Berlin\"`), daylight saving included: a time skipped by a change to summer time does not tick, one repeated by the change back ticks once. Only with `cron`."),
	schema.Duration("catch_up").DefaultDoc("none").Describe("At start, the ticks missed since the last one any process fired, at most this far back, fire (each still once across processes). Without it a start fires nothing missed; with it, a schedule that never fired has missed nothing."),
}

func init() {
	transports.Register(transports.Kind{
		Name:    "schedule",
		Order:   80,
		Attrs:   scheduleAttrs,
		Summary: "a message per tick of a cron expression or an interval, once across processes",
		Doc:     scheduleDoc,
		Example: scheduleExample,
		New:     func() transports.Config { return &Config{} },
	})
}

// Config is a schedule source block, decoded.
type Config struct {
	Options
	DeadLetter string

	deadLetterRange hcl.Range
}

var (
	_ transports.Config            = (*Config)(nil)
	_ transports.RedisBlockReader  = (*Config)(nil)
	_ transports.RedisOptional     = (*Config)(nil)
	_ transports.FlowStoreProvider = (*Config)(nil)
	_ transports.Inspector         = (*Config)(nil)
	_ transports.Ticker            = (*Config)(nil)
	_ transports.DeadLetterStore   = (*Config)(nil)
	_ transports.DeadLetterPager   = (*Config)(nil)
)

// Decode reads cron or every (exactly one), timezone and catch_up.
func (c *Config) Decode(b *transports.Block) {
	a := b.Values(scheduleAttrs)
	cr, ev, tz := a.Attr("cron"), a.Attr("every"), a.Attr("timezone")
	b.OneOf(cr, ev,
		`A schedule source takes "cron" or "every", not both.`,
		`A schedule source needs "cron" (five fields, "0 2 * * *") or "every" (an interval, "30s").`)
	loc := time.UTC
	if tz != nil && a.OK("timezone") {
		if l, err := loadZone(a.String("timezone")); err != nil {
			b.Report(transports.InvalidValue(tz, err.Error()))
		} else {
			loc = l
		}
	}
	if tz != nil && ev != nil && cr == nil {
		b.Report(transports.Unsupported(tz, `"timezone" only applies with "cron": the ticks of "every" are multiples of it from the Unix epoch, the same instants in every zone.`))
	}
	switch {
	case cr != nil && a.OK("cron"):
		clock, err := ParseCron(a.String("cron"), loc)
		switch {
		case err != nil:
			b.Report(transports.InvalidValue(cr, fmt.Sprintf("Not a cron expression: %v.", err)))
		case clock.Next(time.Now()).IsZero():
			b.Report(transports.InvalidValue(cr, fmt.Sprintf("%q names no date that exists (such as 30 February or 31 April): it would never tick.", a.String("cron"))))
		}
		c.Clock = clock
	case ev != nil && cr == nil && a.OK("every"):
		clock, err := Every(a.Duration("every"))
		if err != nil {
			b.Report(transports.InvalidValue(ev, fmt.Sprintf("%v.", capitalize(err.Error()))))
		}
		c.Clock = clock
	}
	c.CatchUp = a.Duration("catch_up")
	c.Pipeline = b.Pipeline.Name
	c.DeadLetter, c.deadLetterRange = b.Pipeline.DeadLetter, b.Pipeline.DeadLetterRange
}

// loadZone loads an IANA zone by name; "Local" (the host's zone, which differs between hosts
// and would make processes disagree on the ticks) is refused.
func loadZone(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, errors.New(`"Local" is the host's own zone, which may differ between the processes that share the schedule; name an IANA zone such as "Europe/Berlin"`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA time zone (such as \"UTC\" or \"Europe/Berlin\").", name)
	}
	return loc, nil
}

func capitalize(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// ReadsRedisBlock: its block takes "redis", where the ticks are taken.
func (c *Config) ReadsRedisBlock() bool { return true }

// WithoutRedis: without Redis the ticks are taken within the process, and dead letters have
// nowhere to go.
func (c *Config) WithoutRedis() hcl.Diagnostics {
	if c.DeadLetter == "" {
		return nil
	}
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Invalid value",
		Detail:   "A schedule source without a redis block has nowhere to keep dead letters (a stream); declare a redis block, or remove dead_letter.",
		Subject:  c.deadLetterRange.Ptr(),
	}}
}

// FlowStore keeps flow control's state in the source's Redis, or within the process without
// one.
func (c *Config) FlowStore(env *transports.Env, pipeline string) (engine.FlowStore, error) {
	if env.RedisBlock == "" {
		return engine.NewMemFlowStore(), nil
	}
	return redisflow.Reader{}.FlowStore(env, pipeline)
}

// NaturalKey is the pipeline's name, every message's key.
func (c *Config) NaturalKey() string { return c.Pipeline }

// Capabilities: nothing to acknowledge.
func (c *Config) Capabilities() engine.Capabilities { return engine.Capabilities{} }

// Build returns the source, on the client of its redis block when it has one (else ticks are
// taken within the process).
func (c *Config) Build(_ context.Context, env *transports.Env) (engine.Source, error) {
	newSource := func(client redis.UniversalClient) (*Source, error) { return New(client, c.Options, env.Logger) }
	if env.RedisBlock != "" {
		return transports.BuildOnClient(env, newSource)
	}
	s, err := newSource(nil)
	if err != nil {
		return nil, err // not s: a nil *Source in an engine.Source is not nil
	}
	return s, nil
}

// Inspect: the schedule as written and its next tick; the dead letters' count.
func (c *Config) Inspect(ctx context.Context, env *transports.Env) (transports.Stats, error) {
	row := transports.Stats{Key: c.Clock.String()}
	if next := c.Clock.Next(time.Now()); !next.IsZero() {
		row.NextTick = &next
	}
	if c.DeadLetter == "" || env.RedisBlock == "" {
		return row, nil
	}
	client, err := env.Client()
	if err != nil {
		return row, err
	}
	err = row.CountDeadLetters(ctx, c.DeadLetter, client.XLen)
	return row, err
}

// NextTick is the first tick after t (zero when the cron expression never matches), for the
// status page.
func (c *Config) NextTick(t time.Time) time.Time { return c.Clock.Next(t) }

// CheckRedrive: a tick's message comes from the clock; there is no key to move it back to.
func (c *Config) CheckRedrive() error {
	return errors.New("reads a schedule: its messages come from the clock, so there is nowhere to redrive dead letters to; list them, or purge them")
}

// ListDeadLetters reads the dead-letter stream.
func (c *Config) ListDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) ([]transports.DeadLetter, int64, error) {
	return streamdlq.Store{Key: c.DeadLetter}.ListDeadLetters(ctx, env, q)
}

// PageDeadLetters reads one page of the dead-letter stream.
func (c *Config) PageDeadLetters(ctx context.Context, env *transports.Env, newest bool, offset, limit int) ([]transports.DeadLetter, int64, error) {
	return streamdlq.Store{Key: c.DeadLetter}.PageDeadLetters(ctx, env, newest, offset, limit)
}

// PurgeDeadLetters deletes dead letters from the dead-letter stream.
func (c *Config) PurgeDeadLetters(ctx context.Context, env *transports.Env, q transports.DeadLetterQuery) (int, error) {
	return streamdlq.Store{Key: c.DeadLetter}.PurgeDeadLetters(ctx, env, q)
}

// RedriveDeadLetters is refused (CheckRedrive).
func (c *Config) RedriveDeadLetters(context.Context, *transports.Env, transports.DeadLetterQuery) (int, string, error) {
	return 0, "", c.CheckRedrive()
}
