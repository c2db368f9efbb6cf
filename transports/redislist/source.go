// Package redislist is the Redis list source (SPEC §2–§5) and the list emit sink.
//
// Producers LPUSH; flowrun reads from the right end, oldest first.
//
// A reliable list (Options.Reliable) reads with BLMOVE key processing RIGHT LEFT, followed, while
// more elements are there and the batch allows, by pipelined non-blocking LMOVEs. An element
// stays in this consumer's processing list until its settlement removes it with
// LREM processing 1 <element>, matching the element byte for byte as it was read, envelope or
// not. A retry copy or dead letter is LPUSHed in the same MULTI/EXEC as that LREM when both keys
// hash to one slot (always on a standalone server); otherwise the copy is written first, so a
// crash leaves a duplicate, never a loss. In a Redis Cluster the list and its processing list
// must hash to one slot (BLMOVE needs it; use a {hash tag}); New refuses otherwise.
//
// Nothing stays stranded in the processing list:
//   - At start, before reading, everything in it (left by a crash of a process with this consumer
//     name) goes back to the right end of the list, the end read next, in its original order, with
//     LMOVE processing key LEFT RIGHT until the processing list is empty.
//   - After a failed read, after any of the client's connections broke in use (go-redis then
//     retries a command on another connection without telling the caller, so a BLMOVE whose reply
//     was lost looks like a read that found nothing; see redisconn.ConnWatch), and every few
//     minutes while the list is idle, the source compares the processing list with the elements
//     it has handed to the engine and not yet settled; any other element goes back to the list.
//     A lost reply thus strands an element for about one read (Options.Block), not minutes.
//   - At a stop, elements read but not yet accepted by the engine go back the same way.
//
// A simple list (Reliable false) reads with BRPOP and then RPOP key count; an element is gone from
// Redis once read, so there is nothing to settle and a crash loses what was in flight.
//
// Backpressure: a read moves at most Options.Batch elements out of the list and the next read
// starts only once the engine has accepted every one of them, so the source never runs more than
// one batch ahead of the engine's free handlers.
//
// A read that fails, or a lost connection, is retried with capped exponential backoff and jitter,
// logged once when it starts failing and once when it recovers; Ready reports false meanwhile.
// An authentication error ends Receive with that error, since it is a configuration problem.
package redislist

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

const (
	// recoverChunk is how many LMOVEs one pipeline sends while emptying the processing list.
	recoverChunk = 128
	// stopTimeout bounds the Redis work done after a stop (returning unhanded elements).
	stopTimeout = 5 * time.Second
)

// sweepEvery is how often an idle reliable list looks for stranded elements, a last resort: a
// lost BLMOVE reply is seen as a failed read or a broken connection and swept at once.
// A variable so that tests can shorten it.
var sweepEvery = 2 * time.Minute

// returnScript moves one element from the processing list (KEYS[1]) back to the read end of the
// list (KEYS[2]), but only if it is still there: a settlement may have removed it meanwhile.
var returnScript = redis.NewScript(`
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 1 then
  return redis.call('RPUSH', KEYS[2], ARGV[1])
end
return 0`)

// Source is a list source. Receive runs in one goroutine; Settle and Requeue may run alongside.
type Source struct {
	engine.ErrorHook // malformed records and failed reads count as source errors
	malformed        codec.MalformedCount

	client  redis.UniversalClient
	opts    Options
	log     zerolog.Logger
	state   *redisconn.StateLog
	secrets []string
	ready   atomic.Bool
	conns   *redisconn.ConnWatch // reliable: a broken connection may have lost a BLMOVE reply
	nextDue atomic.Int64         // durable_zset: unix ms of the earliest delayed copy known; 0 when none
	movedAt atomic.Int64         // durable_zset: unix ms of the last move-back script

	// moveArgs is a read's LMOVE key processing RIGHT LEFT, boxed once and shared by every LMOVE
	// a read queues (go-redis's LMove builds and boxes its arguments per element); remKey is the
	// processing list boxed for the LREMs.
	moveArgs []any
	remKey   any

	// more is how many non-blocking LMOVEs follow a BLMOVE (reliable reads; Receive only). It
	// adapts: it doubles while they all find an element and shrinks when the list runs dry, so
	// a trickle of elements does not cost a full batch of empty replies each.
	more int

	mu sync.Mutex
	// held holds the reads with elements handed to the engine and not yet removed from the
	// processing list (reliable only; their tokens are counted); a sweep leaves those alone.
	// By read, not by element: counting costs one map write per read, and only the sweep, which
	// is rare, looks at the elements.
	held map[*heldRead]struct{}
	// returned holds, in order, what a simple list handed over and the engine gave back
	// unstarted at a stop; Close puts them back at the read end.
	returned []string
	// returnAtClose: Receive ended after the reliable list's recovery, so Close returns what
	// its processing list holds that no handler has.
	returnAtClose atomic.Bool
}

var (
	_ engine.Source   = (*Source)(nil)
	_ engine.Returner = (*Source)(nil)
)

// token is what Delivery.Token holds: the element exactly as read, plus what Settle has already
// done for it, so a batch the engine retries after a partial failure writes no copy twice.
type token struct {
	elem    string
	read    *heldRead // the read it came in, while counted
	counted bool      // in Source.held (guarded by Source.mu)
	copied  bool      // a copy written outside the settling MULTI (another slot) is in place
	member  string    // the delay-queue member of a durable delay, once made
	done    bool      // settled
}

// Element returns the exact bytes a delivery's element was read as, and false for a delivery
// that did not come from a list source.
func Element(d *engine.Delivery) (string, bool) {
	t, ok := d.Token.(*token)
	if !ok {
		return "", false
	}
	return t.elem, true
}

// New returns a list source reading with client, which the caller owns and closes after Close.
func New(client redis.UniversalClient, opts Options, log zerolog.Logger) (*Source, error) {
	if client == nil {
		return nil, errors.New("redislist: no redis client")
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Reliable && !redisconn.SameSlot(client, opts.Key, opts.Processing) {
		return nil, fmt.Errorf("redislist: list %q and processing list %q hash to different cluster slots; "+
			"give them one {hash tag}", opts.Key, opts.Processing)
	}
	if opts.durable() && !redisconn.SameSlot(client, opts.Key, opts.DelayKey) {
		return nil, fmt.Errorf("redislist: list %q and delay_key %q hash to different cluster slots; "+
			"give them one {hash tag}", opts.Key, opts.DelayKey)
	}
	log = log.With().Str(engine.FieldKey, opts.Key).Logger()
	secrets := redisconn.SecretsOf(client)
	s := &Source{
		client:  client,
		opts:    opts,
		log:     log,
		state:   redisconn.NewStateLog(log, "list read", secrets...),
		secrets: secrets,
		more:    opts.Batch - 1,
		held:    map[*heldRead]struct{}{},
	}
	if opts.Reliable {
		s.conns = redisconn.Watch(client)
		s.moveArgs = []any{"lmove", opts.Key, opts.Processing, "RIGHT", "LEFT"}
		s.remKey = opts.Processing
	}
	return s, nil
}

// Options returns the options in effect, defaults applied.
func (s *Source) Options() Options { return s.opts }

// Capabilities: a reliable list acknowledges (LREM), and with durable_zset stores delays; a
// simple list has nothing to settle.
func (s *Source) Capabilities() engine.Capabilities { return s.opts.capabilities() }

// Ready reports whether the last command of the read loop succeeded.
func (s *Source) Ready() bool { return s.ready.Load() }

// Close returns to the list what was read but never handled: a reliable list's unheld
// processing elements, a simple list's elements given back at the stop. The client belongs to
// the caller and stays open.
func (s *Source) Close() error {
	ctx := context.Background()
	if s.returnAtClose.Swap(false) {
		s.returnUnhanded(ctx)
	}
	s.mu.Lock()
	back := s.returned
	s.returned = nil
	s.mu.Unlock()
	if len(back) > 0 {
		s.pushBack(ctx, back)
	}
	return nil
}

// Return takes back deliveries handed over but never started (a stop): Close puts them back
// at the read end of the list.
func (s *Source) Return(ds []*engine.Delivery) {
	for _, d := range ds {
		t, err := tokenOf(d)
		if err != nil {
			continue
		}
		if s.opts.Reliable {
			s.uncount(t) // Close's sweep finds it in the processing list
			continue
		}
		s.mu.Lock()
		s.returned = append(s.returned, t.elem)
		s.mu.Unlock()
	}
}

// Receive reads deliveries into feed until ctx ends, never more than feed has room for.
func (s *Source) Receive(ctx context.Context, feed engine.Feed) error {
	defer s.ready.Store(false)
	var (
		bo        redisconn.Backoff
		recovered = !s.opts.Reliable // a simple list has no processing list to empty
		sweep     bool
		lastSweep time.Time
		broken    uint64 // s.conns.Broken() when last looked at
	)
	if s.opts.Reliable {
		broken = s.conns.Broken()
		defer func() {
			// The engine may still hold elements it was handed: it gives back those no
			// handler started, then calls Close, which returns what nobody holds.
			s.returnAtClose.Store(recovered)
		}()
	}
	for ctx.Err() == nil {
		var (
			elems []string
			err   error
		)
		if s.conns != nil {
			// A connection broke in use since the last look: if it carried a BLMOVE, go-redis
			// sent it again elsewhere and the first one's element sits in the processing list
			// with nobody holding it. The sweep finds it (and costs one LRANGE otherwise).
			if b := s.conns.Broken(); b != broken {
				broken = b
				sweep = sweep || recovered
			}
		}
		switch {
		case !recovered:
			if err = s.recoverAll(ctx); err == nil {
				recovered, lastSweep = true, time.Now()
			}
		case sweep:
			if err = s.sweep(ctx, false); err == nil {
				sweep, lastSweep = false, time.Now()
			}
		default:
			room := min(feed.Room(ctx), s.opts.Batch)
			if room == 0 {
				break
			}
			elems, err = s.read(ctx, room)
		}
		if err == nil {
			s.ready.Store(true)
			s.state.OK()
			bo.Reset()
		}
		if len(elems) > 0 {
			if !s.handOver(ctx, feed, elems) {
				break
			}
		} else if err == nil && s.opts.Reliable && recovered && time.Since(lastSweep) >= sweepEvery {
			sweep = true
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		if redisconn.IsConfigError(err) {
			return redisconn.RedactError(fmt.Errorf("redislist: read %s: %w", s.opts.Key, err), s.secrets...)
		}
		s.ready.Store(false)
		s.state.Fail(err)
		s.ReportError()
		// A BLMOVE whose reply was lost left an element in the processing list.
		sweep = sweep || (s.opts.Reliable && recovered)
		if !redisconn.Sleep(ctx, bo.Next()) {
			break
		}
	}
	return ctx.Err()
}

// read moves up to limit elements (at most one batch) out of the list. It may return elements together with an error
// (a pipeline that broke half way): those elements were read and must be handed over.
func (s *Source) read(ctx context.Context, limit int) ([]string, error) {
	if !s.opts.Reliable {
		return s.readSimple(ctx, limit)
	}
	if s.opts.durable() && s.moveDueNow(time.Now()) {
		if err := s.moveDue(ctx); err != nil {
			return nil, err
		}
	}
	var (
		first string
		err   error
	)
	if block := s.blockFor(); block < time.Second {
		first, err = s.client.Do(ctx, "blmove", s.opts.Key, s.opts.Processing, "RIGHT", "LEFT", blockSeconds(block)).Text()
	} else {
		first, err = s.client.BLMove(ctx, s.opts.Key, s.opts.Processing, "RIGHT", "LEFT", block).Result()
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redislist: blmove %s: %w", s.opts.Key, err)
	}
	elems := []string{first}
	n := min(s.more, limit-1)
	if n <= 0 {
		return elems, nil
	}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.StringCmd, n)
	for i := range cmds {
		cmds[i] = redis.NewStringCmd(ctx, s.moveArgs...) // the arguments are only read
		_ = pipe.Process(ctx, cmds[i])
	}
	if err := redisconn.ExecPipe(ctx, pipe); err != nil {
		s.more = 1
		return elems, fmt.Errorf("redislist: lmove %s: %w", s.opts.Key, err)
	}
	for _, c := range cmds {
		v, err := c.Result()
		if errors.Is(err, redis.Nil) {
			break
		}
		if err != nil {
			s.more = 1
			return elems, fmt.Errorf("redislist: lmove %s: %w", s.opts.Key, err)
		}
		elems = append(elems, v)
	}
	if got := len(elems) - 1; got == n {
		s.more = min(2*n, s.opts.Batch-1)
	} else {
		s.more = max(got, 1)
	}
	return elems, nil
}

func (s *Source) readSimple(ctx context.Context, limit int) ([]string, error) {
	var (
		res []string
		err error
	)
	if s.opts.Block < time.Second {
		res, err = s.client.Do(ctx, "brpop", s.opts.Key, blockSeconds(s.opts.Block)).StringSlice()
	} else {
		res, err = s.client.BRPop(ctx, s.opts.Block, s.opts.Key).Result()
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redislist: brpop %s: %w", s.opts.Key, err)
	}
	elems := []string{res[1]}
	if limit > 1 {
		more, err := s.client.RPopCount(ctx, s.opts.Key, limit-1).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return elems, fmt.Errorf("redislist: rpop %s: %w", s.opts.Key, err)
		}
		elems = append(elems, more...)
	}
	return elems, nil
}

// handOver gives elems to the engine as one batch. On a stop it puts back what was not
// accepted and reports false.
func (s *Source) handOver(ctx context.Context, feed engine.Feed, elems []string) bool {
	// Allocated together, one allocation of each per read rather than per element; the bare
	// elements (the usual ones) share one empty headers map, read-only (engine.Message).
	block := make([]engine.Delivery, len(elems))
	tokBlock := make([]token, len(elems))
	ds := make([]*engine.Delivery, len(elems))
	toks := make([]*token, len(elems))
	bare := map[string]string{}
	for i, e := range elems {
		t, d := &tokBlock[i], &block[i]
		t.elem = e
		d.Key, d.Token = s.opts.Key, t
		if err := codec.DecodeEnvelopeShared([]byte(e), &d.Message, bare); err != nil {
			s.noteMalformed(err)
		}
		ds[i], toks[i] = d, t
	}
	// Counted before the send: a fast handler may settle them before the send returns.
	if s.opts.Reliable {
		s.count(tokBlock)
	}
	if feed.Push(ctx, ds) {
		return true
	}
	if s.opts.Reliable {
		s.uncount(toks...) // returnUnhanded finds them in the processing list
	} else {
		s.pushBack(ctx, elems)
	}
	return false
}

// pushBack returns elements a simple list popped but never handed over to the read end of the
// list, in their original order.
func (s *Source) pushBack(ctx context.Context, elems []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	vals := make([]any, 0, len(elems))
	for i := len(elems) - 1; i >= 0; i-- { // the oldest ends up rightmost, read first
		vals = append(vals, elems[i])
	}
	if err := s.client.RPush(ctx, s.opts.Key, vals...).Err(); err != nil {
		s.log.Error().Str("error", redisconn.Redact(err.Error(), s.secrets...)).Int("elements", len(elems)).
			Msg("elements read but not handled were lost at stop: could not push them back")
		return
	}
	s.log.Debug().Int("elements", len(elems)).Msg("pushed back elements read but not handled at stop")
}

// returnUnhanded runs after a stop: elements in the processing list that the engine never
// accepted go back to the list.
func (s *Source) returnUnhanded(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := s.sweep(ctx, true); err != nil {
		s.log.Warn().Str("error", redisconn.Redact(err.Error(), s.secrets...)).
			Msg("could not return unhandled elements at stop; the next start with this consumer name returns them")
	}
}

// recoverAll empties the processing list into the read end of the list, oldest read first.
func (s *Source) recoverAll(ctx context.Context) error {
	total := 0
	defer func() {
		if total > 0 {
			s.log.Info().Int("elements", total).Str("processing", s.opts.Processing).
				Msg("returned elements left in the processing list by an earlier run")
		}
	}()
	for {
		pipe := s.client.Pipeline()
		cmds := make([]*redis.StringCmd, recoverChunk)
		for i := range cmds {
			// LEFT (newest) first onto the RIGHT end: the oldest ends up rightmost, read first.
			cmds[i] = pipe.LMove(ctx, s.opts.Processing, s.opts.Key, "LEFT", "RIGHT")
		}
		if err := redisconn.ExecPipe(ctx, pipe); err != nil {
			return fmt.Errorf("redislist: return %s to %s: %w", s.opts.Processing, s.opts.Key, err)
		}
		for _, c := range cmds {
			err := c.Err()
			if errors.Is(err, redis.Nil) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("redislist: return %s to %s: %w", s.opts.Processing, s.opts.Key, err)
			}
			total++
		}
	}
}

// sweep returns to the list every element of the processing list that the engine does not hold.
// At a stop that is the ordinary return of what was read but never handed over; otherwise it
// means a reply was lost, worth a warning.
func (s *Source) sweep(ctx context.Context, stopping bool) error {
	elems, err := s.client.LRange(ctx, s.opts.Processing, 0, -1).Result()
	if err != nil {
		return fmt.Errorf("redislist: lrange %s: %w", s.opts.Processing, err)
	}
	if len(elems) == 0 {
		return nil
	}
	avail := s.heldElements()
	var stray []string
	for _, e := range elems { // newest first, so the oldest ends up rightmost, read first
		if avail[e] > 0 {
			avail[e]--
			continue
		}
		stray = append(stray, e)
	}
	if len(stray) == 0 {
		return nil
	}
	keys := []string{s.opts.Processing, s.opts.Key}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(stray))
	for i, e := range stray {
		// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT, and this is rare.
		cmds[i] = returnScript.Eval(ctx, pipe, keys, e)
	}
	if err := redisconn.ExecPipe(ctx, pipe); err != nil {
		return fmt.Errorf("redislist: return %s to %s: %w", s.opts.Processing, s.opts.Key, err)
	}
	n := 0
	for _, c := range cmds {
		v, err := c.Int64()
		if err != nil {
			return fmt.Errorf("redislist: return %s to %s: %w", s.opts.Processing, s.opts.Key, err)
		}
		if v > 0 {
			n++
		}
	}
	switch {
	case n > 0 && stopping:
		s.log.Info().Int("elements", n).Str("processing", s.opts.Processing).
			Msg("returned unhandled elements to the list at stop")
	case n > 0:
		s.log.Warn().Int("elements", n).Str("processing", s.opts.Processing).
			Msg("returned elements stranded in the processing list")
	}
	return nil
}

// heldRead is one read's tokens while any of them is counted.
type heldRead struct {
	toks    []token
	counted int
}

// count notes one read's tokens as held by the engine.
func (s *Source) count(toks []token) {
	r := &heldRead{toks: toks, counted: len(toks)}
	s.mu.Lock()
	for i := range toks {
		toks[i].read, toks[i].counted = r, true
	}
	s.held[r] = struct{}{}
	s.mu.Unlock()
}

// uncount notes tokens as no longer held: settled, given back or forgotten.
func (s *Source) uncount(toks ...*token) {
	s.mu.Lock()
	for _, t := range toks {
		if !t.counted {
			continue
		}
		t.counted = false
		if r := t.read; r != nil {
			if r.counted--; r.counted == 0 {
				delete(s.held, r)
			}
			t.read = nil
		}
	}
	s.mu.Unlock()
}

// heldElements counts, by content, the elements the engine holds.
func (s *Source) heldElements() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	avail := make(map[string]int)
	for r := range s.held {
		for i := range r.toks {
			if r.toks[i].counted {
				avail[r.toks[i].elem]++
			}
		}
	}
	return avail
}

// blockSeconds formats a sub-second block for BLMOVE and BRPOP, which take fractional seconds.
// go-redis's typed BLMove and BRPop would round it up to a second and log about it on the
// standard logger, so sub-second blocks go through Do (whose read timeout, 3s by default, is
// longer); longer blocks use the typed commands, which count whole seconds.
func blockSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
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
