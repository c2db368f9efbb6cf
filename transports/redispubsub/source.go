// Package redispubsub is the Redis Pub/Sub source (SPEC §2–§5) and the pubsub emit sink.
//
// The source SUBSCRIBEs to channels or PSUBSCRIBEs to patterns on a dedicated connection
// (a go-redis PubSub). A message's Key is the channel it was published on (also under a
// pattern); its body is an envelope or a bare payload (SPEC §3).
//
// Pub/Sub is at-most-once by nature: Redis keeps nothing. A message published while the
// subscription is down (a restart, a network fault) is never seen; one in a handler when the
// process dies is gone. While every handler is busy the source stops reading, so messages wait
// in the connection's buffers and in Redis's output buffer for this client; a subscriber that
// falls far behind is disconnected by Redis (client-output-buffer-limit pubsub), and what was
// buffered is lost. So there is nothing to acknowledge (Capabilities{}): a retry copy is
// PUBLISHed again, to the channel the message came from or, under patterns, to RetryTo; a dead
// letter is XADDed to a stream, since a channel would not keep it.
//
// After a lost connection go-redis dials again and resubscribes; the source retries with capped
// exponential backoff and jitter, logs once when the subscription goes down and once when it is
// back, and Ready reports true only once Redis has confirmed the subscription. A connection
// that goes silent is detected with a PING after a few quiet seconds.
package redispubsub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// Timings of the read loop; variables so that tests can shorten them.
var (
	// pollInterval bounds each wait for a message, so a stop is noticed within it.
	pollInterval = time.Second
	// quietBeforePing is how long without any reply before a PING checks the connection.
	quietBeforePing = 5 * time.Second
	// pingTimeout is how long a PING may go unanswered before the connection counts as dead.
	pingTimeout = 5 * time.Second
)

// Options configure a Pub/Sub source: exactly one of Channels or Patterns.
type Options struct {
	Channels []string // SUBSCRIBE
	Patterns []string // PSUBSCRIBE
	// RetryTo is where copies of messages received under Patterns are published (SPEC's
	// retry_to). Ignored with Channels: a copy goes back to its own channel.
	RetryTo string
}

// Validate reports options no Pub/Sub source can run with.
func (o *Options) Validate() error {
	switch {
	case len(o.Channels) > 0 && len(o.Patterns) > 0:
		return errors.New("redispubsub: channels and patterns are exclusive")
	case len(o.Channels) == 0 && len(o.Patterns) == 0:
		return errors.New("redispubsub: channels or patterns required")
	}
	for _, n := range append(append([]string(nil), o.Channels...), o.Patterns...) {
		if n == "" {
			return errors.New("redispubsub: empty channel or pattern")
		}
	}
	return nil
}

// Source is a Pub/Sub source. Receive runs in one goroutine; Settle and Requeue may run
// alongside it, on the client's pool (never on the subscribed connection).
type Source struct {
	engine.ErrorHook // malformed records and failed reads count as source errors
	malformed        codec.MalformedCount

	client  redis.UniversalClient
	opts    Options
	log     zerolog.Logger
	state   *redisconn.StateLog
	secrets []string
	ready   atomic.Bool
}

var _ engine.Source = (*Source)(nil)

// token is what Delivery.Token holds.
type token struct {
	channel string
	pattern string // the pattern that matched, "" under SUBSCRIBE
	done    bool   // settled: a batch the engine retries writes no copy twice
}

// New returns a Pub/Sub source using client, which the caller owns and closes after Close.
func New(client redis.UniversalClient, opts Options, log zerolog.Logger) (*Source, error) {
	if client == nil {
		return nil, errors.New("redispubsub: no redis client")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	secrets := redisconn.SecretsOf(client)
	return &Source{
		client:  client,
		opts:    opts,
		log:     log,
		state:   redisconn.NewStateLog(log, "pubsub subscription", secrets...),
		secrets: secrets,
	}, nil
}

// Capabilities: Pub/Sub has no acknowledgement.
func (s *Source) Capabilities() engine.Capabilities { return engine.Capabilities{} }

// Ready reports whether Redis has confirmed the subscription on the current connection.
func (s *Source) Ready() bool { return s.ready.Load() }

// Close releases nothing: Receive closes its subscription, and the client belongs to the caller.
func (s *Source) Close() error { return nil }

// subscribe opens a dedicated connection. An error here is not final: go-redis remembers the
// channels and subscribes when the next receive dials.
func (s *Source) subscribe(ctx context.Context) *redis.PubSub {
	if len(s.opts.Patterns) > 0 {
		return s.client.PSubscribe(ctx, s.opts.Patterns...)
	}
	return s.client.Subscribe(ctx, s.opts.Channels...)
}

// Receive reads messages into feed until ctx ends. A message already read when ctx ends is
// dropped (at-most-once).
func (s *Source) Receive(ctx context.Context, feed engine.Feed) error {
	defer s.ready.Store(false)
	ps := s.subscribe(ctx)
	defer func() { ps.Close() }()
	var (
		bo        redisconn.Backoff
		lastHeard = time.Now()
		pingSent  time.Time
		room      int // messages the engine has room for before the next Room
	)
	for ctx.Err() == nil {
		if room == 0 {
			// Never read more than the engine can take: while every handler is busy, messages
			// wait in the connection's buffers (see the package doc).
			if room = feed.Room(ctx); room == 0 {
				break
			}
		}
		v, err := ps.ReceiveTimeout(ctx, pollInterval)
		if err != nil && isTimeout(err) {
			err = nil
			switch {
			case !pingSent.IsZero() && time.Since(pingSent) >= pingTimeout:
				err = fmt.Errorf("no reply to PING within %s", pingTimeout)
			case pingSent.IsZero() && time.Since(lastHeard) >= quietBeforePing:
				if err = ps.Ping(ctx); err == nil {
					pingSent = time.Now()
				}
			}
			if err != nil {
				// A silent connection: start over on a new one.
				ps.Close()
				ps = s.subscribe(ctx)
				lastHeard, pingSent = time.Now(), time.Time{}
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if redisconn.IsConfigError(err) {
				return redisconn.RedactError(fmt.Errorf("redispubsub: subscribe: %w", err), s.secrets...)
			}
			s.ready.Store(false)
			s.state.Fail(err)
			s.ReportError()
			if !redisconn.Sleep(ctx, bo.Next()) {
				break
			}
			continue
		}
		if v == nil {
			continue // a quiet poll
		}
		lastHeard, pingSent = time.Now(), time.Time{}
		switch m := v.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "psubscribe" {
				// Each (re)connection subscribes everything in one command, so the first
				// confirmation means the subscription is whole.
				s.ready.Store(true)
				s.state.OK()
				bo.Reset()
			}
		case *redis.Message:
			room--
			if !s.handOver(ctx, feed, m) {
				s.log.Debug().Str(engine.FieldKey, m.Channel).Msg("message dropped at stop")
				return ctx.Err()
			}
		}
	}
	return ctx.Err()
}

func (s *Source) handOver(ctx context.Context, feed engine.Feed, m *redis.Message) bool {
	d := &engine.Delivery{
		Message: engine.Message{Key: m.Channel},
		Token:   &token{channel: m.Channel, pattern: m.Pattern},
	}
	if err := codec.DecodeEnvelopeInto([]byte(m.Payload), &d.Message); err != nil {
		s.noteMalformed(err)
	}
	return feed.Push(ctx, []*engine.Delivery{d})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// noteMalformed counts a malformed envelope, read as a bare payload (SPEC §3), and logs the
// first, with where in the element it went wrong: one line per pipeline, not one per message.
func (s *Source) noteMalformed(err error) {
	s.ReportError()
	if s.malformed.Add() {
		s.log.Warn().Err(err).Msg("malformed envelope read as a bare payload; later ones are counted, not logged")
	}
}

// Malformed returns how many malformed envelopes were read as bare payloads so far.
func (s *Source) Malformed() int64 { return s.malformed.Load() }
