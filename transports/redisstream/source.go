// Package redisstream is the consumer-group transport: the stream, claiming and reclaim sources
// of SPEC §2, settled with XACK, XADD copies, dead letters and durable delays exactly as §4–§6
// say. It speaks Redis through a go-redis UniversalClient it is handed and never closes.
//
// Connections: reads of new entries block on a one-connection client of the source's own
// (XREADGROUP BLOCK; closed at a stop, so a stop never waits out a block; on a Cluster the
// shared client is used); settlements, keep-alives, claims and delay moves use the shared
// client's pool (redisconn.New configures at least redisconn.MinPoolSize).
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/internal/delayq"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// Source is one stream, claiming or reclaim source. Receive runs in one goroutine and Settle in
// another; Requeue, Ready and Capabilities may be called from anywhere.
type Source struct {
	engine.ErrorHook // malformed records and failed reads count as source errors

	c       redis.UniversalClient
	o       Options
	log     zerolog.Logger
	secrets []string
	durable bool // delayed_retry = durable_zset

	track   *tracker
	dials   *dialCounter // stream kind: connections of the client that broke in use
	ready   atomic.Bool
	nextDue atomic.Int64 // unix ms of the earliest delayed copy known; 0 when none

	copies copiedSet // ids whose copy to another cluster slot is written, not yet acked

	kaEvery  time.Duration
	kaOnce   sync.Once
	kaCancel context.CancelFunc
	kaDone   chan struct{}

	// noBare: claiming passes go through go-redis even where the read connection is bare, so
	// tests can watch them with hooks.
	noBare bool

	closeOnce sync.Once
	closed    atomic.Bool
}

var _ engine.Source = (*Source)(nil)

// New returns a source reading opts.Stream. The client is the caller's and is never closed here.
// In a Redis Cluster a durable_zset source is refused unless stream and delay_key share a slot.
func New(client redis.UniversalClient, opts Options, log zerolog.Logger) (*Source, error) {
	if client == nil {
		return nil, errors.New("redisstream: nil client")
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("redisstream: %s source %q: %w", opts.Kind, opts.Stream, err)
	}
	s := &Source{
		c:       client,
		o:       opts,
		log:     log.With().Str("key", opts.Stream).Logger(),
		secrets: redisconn.SecretsOf(client),
		durable: opts.DelayedRetry == DelayDurableZSet,
		track:   newTracker(opts.Batch),
	}
	if s.durable && !redisconn.SameSlot(client, opts.Stream, opts.DelayKey) {
		return nil, fmt.Errorf("redisstream: stream %q and delay_key %q hash to different cluster slots; "+
			"give both the same {hash tag}, e.g. \"{%s}\" and \"{%s}%s\"",
			opts.Stream, opts.DelayKey, opts.Stream, opts.Stream, DelayKeySuffix)
	}
	if opts.Kind == KindStream {
		s.dials = watchDials(client)
	} else {
		// Well inside min_idle, so a late tick still lands before another worker's claim.
		s.kaEvery = max(opts.MinIdle/3, 5*time.Millisecond)
	}
	return s, nil
}

// Capabilities declares what this source does natively (SPEC §4, §5).
func (s *Source) Capabilities() engine.Capabilities { return s.o.capabilities() }

// Ready reports whether the last read succeeded (for /readyz). It is false before the first
// read and while Redis is unreachable.
func (s *Source) Ready() bool { return s.ready.Load() }

// Options returns the options in effect, defaults applied.
func (s *Source) Options() Options { return s.o }

// Close stops the keep-alive. Call it after Receive has returned and the last Settle is done.
// The client stays open. Close is idempotent.
func (s *Source) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.kaOnce.Do(func() {}) // a keep-alive never started must not start after Close
		if s.kaCancel != nil {
			s.kaCancel()
			<-s.kaDone
		}
	})
	return nil
}

// startKeepAlive starts the keep-alive goroutine once (claiming and reclaim). It outlives
// Receive, since handlers still run and settle after reading stops, and ends at Close.
func (s *Source) startKeepAlive() {
	if s.o.Kind == KindStream {
		return
	}
	s.kaOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		s.kaCancel, s.kaDone = cancel, make(chan struct{})
		go s.keepAlive(ctx)
	})
}

// lowerNextDue records a delayed copy due at ms if it is earlier than the one known.
func (s *Source) lowerNextDue(ms int64) { delayq.Lower(&s.nextDue, ms) }

// dialCounter tells a stream source that one of its client's connections broke in use. go-redis
// retries a command whose connection broke, on another connection, without telling the caller;
// when that command was a read whose reply was lost, its entries are pending for this consumer
// yet were never handed out. Seeing n change, a stream source re-reads its own pending entries
// (SPEC §10). Only connections that failed count (redisconn.ConnWatch): a pool that merely grows,
// or drops an idle connection, causes no re-read.
type dialCounter struct{ n brokenCount }

// brokenCount reads a ConnWatch's count as receive.go expects: n.Load().
type brokenCount struct{ w *redisconn.ConnWatch }

func (b brokenCount) Load() uint64 { return b.w.Broken() }

func watchDials(c redis.UniversalClient) *dialCounter {
	return &dialCounter{n: brokenCount{redisconn.Watch(c)}}
}

// tokenID is the entry id d settles: its Token, which a read sets to a *string of the id (a
// pointer boxes with no allocation, where a string took one per entry; reads allocate a
// reply's ids together, see tokens), or a string id; else its ID.
func tokenID(d *engine.Delivery) string {
	switch t := d.Token.(type) {
	case *string:
		if t != nil && *t != "" {
			return *t
		}
	case string:
		if t != "" {
			return t
		}
	}
	return d.ID
}

// tokens is a read's settle tokens: one id each, allocated together, for Delivery.Token.
type tokens []string

// set makes d's Token the i-th of ts, holding d's id.
func (ts tokens) set(d *engine.Delivery, i int) {
	ts[i] = d.ID
	d.Token = &ts[i]
}

func isNil(err error) bool { return errors.Is(err, redis.Nil) }
