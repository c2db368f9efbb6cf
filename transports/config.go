package transports

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// Config is one source block, decoded by its kind: what Kind.New returns and config fills.
type Config interface {
	// Decode reads the block, applying every default. Its mistakes go to b (the Attributes
	// decoders report theirs, Report adds others), each with a range: a missing attribute at
	// b.DefRange (or, for a pipeline attribute, b.Pipeline.DefRange), a wrong one at its value.
	// It is called once, after the rest of the pipeline is decoded.
	Decode(b *Block)
	// NaturalKey is the key messages of this source usually carry ("" when there is none): a
	// test block's message key defaults to it.
	NaturalKey() string
	// Capabilities is what the source built from this config will declare
	// (engine.Source.Capabilities), known without connecting anywhere.
	Capabilities() engine.Capabilities
	// Build returns the source for one pipeline of `flowrun run`. What it opens and the source
	// does not close itself it registers with env.OnClose; Redis clients belong to env.
	Build(ctx context.Context, env *Env) (engine.Source, error)
}

// RedisBlockReader is implemented by a Config whose source reads from a redis block when
// ReadsRedisBlock says so: its block takes the "redis" attribute, which config resolves (optional
// when exactly one redis block exists) and Env.RedisBlock names at run time; a Go handler's
// Redis emits that name no block go through it; `flowrun inspect` and `flowrun dlq` connect to it
// first. Kind.New's empty Config answers for the kind.
type RedisBlockReader interface {
	ReadsRedisBlock() bool
}

// RedisOptional is implemented by a RedisBlockReader that also runs without Redis (the
// schedule source, within the process). Where no redis block is declared at all, config leaves
// the source's redis block "" rather than reporting it missing, and reports what WithoutRedis
// returns: what the source cannot do without Redis (keep dead letters).
type RedisOptional interface {
	WithoutRedis() hcl.Diagnostics
}

// FlowStoreProvider is implemented by a Config whose source can keep a pipeline's flow-control
// state (SPEC §13) where every process running the pipeline shares it: `flowrun run` asks it for
// the store of a pipeline with flow control. A source without it keeps the state in the process.
type FlowStoreProvider interface {
	FlowStore(env *Env, pipeline string) (engine.FlowStore, error)
}

// TraceCarrier is implemented by a Config whose spans name a messaging system other than the
// kind's name (messaging.system, docs/tracing.md): "redis" for every Redis source.
type TraceCarrier interface {
	TraceSystem() string
}

// ClusterChecker is implemented by a Config whose keys must share a Redis Cluster hash slot
// (one script or BLMOVE touches them together). config calls it when the source's redis block
// is a cluster, after references are resolved; redisBlock is that block's name.
type ClusterChecker interface {
	CheckCluster(redisBlock string) hcl.Diagnostics
}

// StdinReader is implemented by a Config whose source reads standard input: at most one such
// pipeline may run at once.
type StdinReader interface {
	ReadsStdin() bool
}

// RetryTargeter is implemented by a Config whose retry copies go to a key other than the
// source's own (a durable delay queue), known without connecting: `flowrun graph` draws it.
// RetryTarget returns "" when copies go back to the source.
type RetryTargeter interface {
	RetryTarget() string
}

// Ticker is implemented by a Config whose source starts work on a clock (the schedule
// source): the status page shows its next tick.
type Ticker interface {
	// NextTick is the first tick after t, the zero time when there is none.
	NextTick(t time.Time) time.Time
}

// Inspector is implemented by a Config whose source has numbers for `flowrun inspect`
// (SPEC §1). On an error it returns what it has read so far.
type Inspector interface {
	Inspect(ctx context.Context, env *Env) (Stats, error)
}

// Stats is a source's row of `flowrun inspect`. A nil number does not apply to the source (or,
// for Lag, see LagUnknown): a dash in the table, null in JSON.
type Stats struct {
	Key   string // what the source reads: a stream, a list, channels, a file, "stdin"
	Group string // a consumer group

	Length  *int64
	Lag     *int64
	Pending *int64
	// LagUnknown: the group exists, but Redis cannot tell its lag ("?" in the table).
	LagUnknown bool
	// LagBound is the lag, or where Redis cannot tell it an upper bound (SPEC §10: what
	// flowrun_source_lag reports, never 0 for an unknown lag).
	LagBound          *int64
	OldestPendingIdle *time.Duration
	Processing        string // the list Pending counts, for a reliable list
	DelayKey          string // a durable delay queue
	Delayed           *int64
	NextDue           *time.Time
	NextTick          *time.Time // a schedule source's next tick
	DeadLetter        string     // the dead-letter key
	DeadLetters       *int64
}

// CountDeadLetters sets s.DeadLetter to key and s.DeadLetters to its length, read with length
// (the client's XLen or LLen); it does nothing when key is "" (no dead_letter).
func (s *Stats) CountDeadLetters(ctx context.Context, key string, length func(context.Context, string) *redis.IntCmd) error {
	if key == "" {
		return nil
	}
	s.DeadLetter = key
	n, err := length(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("dead letters %s: %w", key, err)
	}
	s.DeadLetters = &n
	return nil
}

// DeadLetterStore is implemented by a Config whose dead letters `flowrun dlq` can list, move
// back to the source and delete. Its methods are called only for a pipeline with a dead_letter.
// Each walks the letters oldest first and stops at the first error of q.Match.
type DeadLetterStore interface {
	// CheckRedrive says, before connecting, why a redrive could not work (nil when it can),
	// worded to follow `pipeline "NAME" `.
	CheckRedrive() error
	// ListDeadLetters returns up to q.Limit of the letters q selects, oldest first, and how
	// many it selects in all.
	ListDeadLetters(ctx context.Context, env *Env, q DeadLetterQuery) (letters []DeadLetter, total int64, err error)
	// RedriveDeadLetters moves up to q.Limit of the letters q selects back to the source with
	// their retry count reset, and says where they went; it returns how many it moved, also on
	// error. Letters that are not selected stay, in their order. Only the letters there when it
	// starts are considered, so a letter that fails again at once is not moved round in a loop.
	RedriveDeadLetters(ctx context.Context, env *Env, q DeadLetterQuery) (moved int, target string, err error)
	// PurgeDeadLetters deletes up to q.Limit of the letters q selects (each exactly: a stream
	// entry by id, a list element by value) and returns how many it deleted, also on error.
	PurgeDeadLetters(ctx context.Context, env *Env, q DeadLetterQuery) (deleted int, err error)
}

// DeadLetterPager is implemented by a DeadLetterStore that can read one page of its letters
// without walking them all (the status page's unfiltered view).
type DeadLetterPager interface {
	// PageDeadLetters skips offset letters and returns up to limit of the next, counted from
	// the newest end and newest first when newest is set, else from the oldest and oldest
	// first; and how many letters there are. It reads offset+limit letters at most.
	PageDeadLetters(ctx context.Context, env *Env, newest bool, offset, limit int) (letters []DeadLetter, total int64, err error)
}

// DeadLetterQuery selects dead letters for a DeadLetterStore.
type DeadLetterQuery struct {
	// Limit is how many letters at most (0: all).
	Limit int
	// Match selects a letter (nil: every one). It gets the letter as DeadLetter.Message: Key
	// is the dead-letter key, ID the letter's own id where its store has one.
	Match func(*engine.Message) (bool, error)
}

// Selects reports whether q selects m.
func (q DeadLetterQuery) Selects(m *engine.Message) (bool, error) {
	if q.Match == nil {
		return true, nil
	}
	return q.Match(m)
}

// DeadLetter is one dead letter as `flowrun dlq list` shows it.
type DeadLetter struct {
	ID      string // the dead letter's own id where its store has one (a stream entry id)
	Message *engine.Message
}

// DeadLetterLocator is implemented by a Config whose dead letters `flowrun dlq` cannot reach,
// to say where they are instead: `records in its stream file, not in Redis`.
type DeadLetterLocator interface {
	DeadLettersAt() string
}

// Env is what the command line gives a kind: a logger, the standard streams and Redis clients.
// Fields that a command does not provide are zero (inspect and dlq have no Stdin).
type Env struct {
	// Logger is scoped to the pipeline (Build) or the command.
	Logger zerolog.Logger
	// Stdin is the process's standard input.
	Stdin io.Reader
	// Stdout is the process's standard output, shared by everything that writes records to it,
	// so that lines never interleave.
	Stdout *codec.LineWriter
	// RedisBlock is the source's redis block, resolved at load time ("" for a source that reads
	// none: see RedisBlockReader).
	RedisBlock string
	// Redis returns the client of a redis block by name, opening it on first use. The command
	// line owns the clients and closes them last.
	Redis func(name string) (redis.UniversalClient, error)
	// OnClose registers a release to run when the command ends, in reverse order of
	// registration, before the Redis clients are closed.
	OnClose func(func() error)
}

// Client returns the client of the source's own redis block.
func (e *Env) Client() (redis.UniversalClient, error) {
	if e.Redis == nil || e.RedisBlock == "" {
		return nil, errors.New("transports: no redis block for this source")
	}
	return e.Redis(e.RedisBlock)
}

// BuildOnClient is Config.Build for a source that reads with the client of its redis block:
// newSource builds the source on that client.
func BuildOnClient[S engine.Source](env *Env, newSource func(redis.UniversalClient) (S, error)) (engine.Source, error) {
	client, err := env.Client()
	if err != nil {
		return nil, err
	}
	s, err := newSource(client)
	if err != nil {
		return nil, err // not s: a nil *Source in an engine.Source is not nil
	}
	return s, nil
}

// RedisSink is EmitKind.Sink for an emit kind written through a redis block: it opens the
// target's client and builds the sink on it with newSink.
func RedisSink(newSink func(redis.UniversalClient) engine.Sink) func(engine.Target, *Env) (engine.Sink, error) {
	return func(t engine.Target, env *Env) (engine.Sink, error) {
		c, err := env.Redis(t.Redis)
		if err != nil {
			return nil, err
		}
		return newSink(c), nil
	}
}
