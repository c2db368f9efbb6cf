package redisstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/internal/delayq"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// Receive reads until ctx ends and returns nil then. A failing read (Redis down, connection
// lost, group deleted) is retried with backoff, logged once per state change, and Ready is
// false meanwhile. The one error it returns is an authentication failure before any read has
// succeeded: a configuration problem (SPEC §10), with the password redacted.
//
// Reads for new entries go out on a connection of their own (see newReadClient), which is
// closed the moment ctx ends: a read blocked in XREADGROUP BLOCK is cut short, so a stop does
// not wait out the block (on a Cluster it still does, at most one block). Entries read but not
// yet handed to the engine when ctx ends stay pending in Redis: a stream source re-reads them
// at its next start, claiming and reclaim take them back after min_idle.
func (s *Source) Receive(ctx context.Context, feed engine.Feed) error {
	if s.closed.Load() {
		return errors.New("redisstream: receive on a closed source")
	}
	s.startKeepAlive()
	if s.o.Trim == TrimAcked || s.o.ConsumerTTL > 0 {
		hctx, stopHygiene := context.WithCancel(ctx)
		defer stopHygiene()
		go s.hygiene(hctx)
	}
	r := &reader{s: s, feed: feed}
	r.reset()
	if rc := s.newReadClient(r.dialed.Store); rc != nil {
		closeRC := sync.OnceFunc(func() { rc.Close() })
		stopAfter := context.AfterFunc(ctx, closeRC)
		defer func() {
			stopAfter()
			closeRC()
		}()
		r.rc = rc
		defer r.dropConn()
	}
	defer r.dropCarry()
	defer r.dropPasses()
	var bo redisconn.Backoff
	state := redisconn.NewStateLog(s.log, "redis stream read", s.secrets...)
	everOK := false
	for ctx.Err() == nil {
		err := r.step(ctx)
		if err == nil {
			everOK = true
			s.ready.Store(true) // before the hand-over: whoever receives an entry sees Ready
			state.OK()
			bo.Reset()
		}
		r.push(ctx, r.got)
		r.got = nil
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		s.ready.Store(false)
		r.dropConn()
		err = redisconn.RedactError(err, s.secrets...)
		if !everOK && redisconn.IsConfigError(err) {
			return fmt.Errorf("redisstream: %s: %w", s.o.Stream, err)
		}
		state.Fail(err)
		s.ReportError()
		r.reset()
		redisconn.Sleep(ctx, bo.Next()) // the loop checks ctx
	}
	return nil
}

// newReadClient returns a client of the source's own, on the handed client's options, for the
// reads of new entries: go-redis does not abandon a command when its context ends, so the only
// way to cut a blocked XREADGROUP short at a stop is to close its connection, and a connection
// of the shared pool cannot be singled out. It holds one connection and never resends a
// command whose connection broke: such a read is an error, after which what it may have
// delivered comes back (SPEC §10: a stream source re-reads its pending entries, claiming and
// reclaim take them back after min_idle). Nil where the client is not a plain or Sentinel
// client (a Cluster): reads then use the shared client and a stop waits for the read, at most
// one block.
//
// dialed, when set, is told of each connection the client dials, before go-redis sets it up:
// with one connection in its pool, the last one dialed is the one reads use (rawRead).
func (s *Source) newReadClient(dialed func(net.Conn)) *redis.Client {
	c, ok := s.c.(*redis.Client)
	if !ok {
		return nil
	}
	o := *c.Options() // the Dialer comes along: a Sentinel client's finds the current master
	if dial := o.Dialer; dialed != nil && dial != nil {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := dial(ctx, network, addr)
			if err == nil {
				dialed(nc)
			}
			return nc, err
		}
	}
	o.PoolSize, o.MinIdleConns, o.MaxActiveConns = 1, 0, 0
	o.MaxRetries = -1
	// RESP2: over RESP3, go-redis peeks at a connection held for more than 5 s for push
	// notifications before and after each command, two system calls per read, and this
	// connection carries only this source's reads (nothing pushes to it).
	o.Protocol = 2
	o.PushNotificationProcessor = nil // each client builds its own
	return redis.NewClient(&o)
}

// reader is Receive's state; only Receive's goroutine touches it.
type reader struct {
	s         *Source
	feed      engine.Feed
	needGroup bool   // XGROUP CREATE before the next read
	pending   bool   // stream kind: re-reading own pending entries
	cursor    string // pending re-read: last id seen
	autoclaim string // reclaim: XAUTOCLAIM cursor
	// claimedLast: reclaim's last pass claimed something, so the next one asks for the
	// delivery counts in the same round trip.
	claimedLast bool
	dials       uint64 // stream: the dial count when last checked

	rc   *redis.Client // reads of new entries, when the source has a client of its own
	conn *redis.Conn   // rc's one connection, held from read to read; dropped on an error
	// raw reads and claims on conn's bare connection once go-redis has set it up (bare);
	// dialed is the last connection rc dialed.
	raw       *rawRead
	bareTried bool // bare has set up conn (raw is nil if it cannot be read bare)
	dialed    dialedConn
	got       []*engine.Delivery // what the last step read, handed over by Receive
	carry     []*engine.Delivery // reclaim: claimed, tracked, delivery counts not learned yet

	// nextClaim: a claim pass that found nothing idle is not repeated before then, so a fresh
	// backlog costs one round trip per read, as for the stream kind.
	nextClaim time.Time

	// claiming: the idle entries the last XCLAIM's round trip listed for the next pass, when
	// that XPENDING was sent, and whether it found none.
	cands    []candidate
	candsAt  time.Time
	noneIdle bool
	// passes: claiming passes sent and not yet handed over, oldest first (claimAhead).
	passes []*claimPass
}

// reset is the state at start and after any failure: the group may be gone (a restarted Redis
// without persistence), and a stream source re-reads its own pending entries (SPEC §10).
func (r *reader) reset() {
	r.cands, r.noneIdle = nil, false
	r.needGroup = true
	r.pending = r.s.o.Kind == KindStream
	r.cursor = "0"
	r.autoclaim = "0-0"
}

// step is one read: move due delayed copies, read, hand the entries over.
func (r *reader) step(ctx context.Context) error {
	s := r.s
	if s.dials != nil {
		if n := s.dials.n.Load(); n != r.dials {
			r.dials = n
			r.reset() // a reconnect go-redis handled silently: re-read own pending entries
		}
	}
	if r.needGroup {
		if err := s.ensureGroup(ctx); err != nil {
			return err
		}
		r.needGroup = false
	}
	if s.durable {
		if err := s.moveDue(ctx); err != nil {
			return err
		}
	}
	// Never more than one batch ahead of the handlers: read at most what the engine has room
	// for (it waits until half a batch is free, so reads stay large under load).
	room := min(r.feed.Room(ctx), s.o.Batch)
	if room == 0 {
		return ctx.Err()
	}
	if r.pending {
		ds, err := r.readPending(ctx, room)
		if err != nil {
			return err
		}
		r.got = ds
		return nil
	}
	var (
		claimed []*engine.Delivery
		err     error
	)
	if s.o.Kind != KindStream && (len(r.carry) > 0 || len(r.passes) > 0 || !time.Now().Before(r.nextClaim)) {
		switch s.o.Kind {
		case KindClaiming:
			claimed, err = r.claimAhead(ctx, room)
		case KindReclaim:
			claimed, err = r.autoClaim(ctx, room)
		}
		if len(r.passes) > 0 {
			// More is being claimed: it uses up the room, and new entries wait for the
			// takeover to end (as they would behind a pass that filled the room).
			r.got = claimed
			return err
		}
		if err == nil && (r.noneIdle || len(claimed) == 0 && len(r.carry) == 0 && r.autoclaim == "0-0") {
			// Nothing was idle: an entry read since needs min_idle to become so, and one that
			// was nearly there waits at most claimPause longer.
			r.nextClaim = time.Now().Add(claimPause(s.o.MinIdle))
			r.noneIdle, r.cands = false, nil
		}
	}
	if err != nil {
		// What was claimed before the failure is this consumer's now, its delivery count
		// raised: it is handed over, not left to come back after min_idle as one more attempt.
		r.got = claimed
		return err
	}
	// Claimed entries use up the room.
	var fresh []*engine.Delivery
	if room -= len(claimed); room > 0 {
		block := s.blockFor()
		if len(claimed) > 0 {
			block = -1 // work in hand: do not wait for more
		}
		fresh, err = r.readNew(ctx, room, block)
	}
	r.got = append(claimed, fresh...)
	return err
}

// claimPause is how long a claim pass that found nothing idle is not repeated: a tenth of
// min_idle, at most a second, so a taken-back entry comes back at most that much later.
func claimPause(minIdle time.Duration) time.Duration {
	return min(minIdle/10, time.Second)
}

// readClient is the client reads of new entries use: the source's own connection, held rather
// than taken from rc's pool for each read, since go-redis checks a pooled connection's health
// with a system call each time it hands it out (at low rates, one more per message).
func (r *reader) readClient() redis.Cmdable {
	if r.rc == nil {
		return r.s.c
	}
	if r.conn == nil {
		r.conn = r.rc.Conn()
	}
	return r.conn
}

// dropConn gives the held read connection back after an error (go-redis closes it if it
// broke), so the next read takes a checked or new one from the pool.
func (r *reader) dropConn() {
	r.waitRawPasses()               // their replies are read on it
	r.raw, r.bareTried = nil, false // a connection it gave up on, it closed
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
}

// push hands ds to the engine. Once ctx has ended nothing more is handed over, and the rest
// are untracked: they stay pending in Redis for the next start (stream) or for min_idle
// (claiming, reclaim).
func (r *reader) push(ctx context.Context, ds []*engine.Delivery) {
	if len(ds) == 0 || r.feed.Push(ctx, ds) {
		return
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	r.s.track.remove(ids)
}

func (s *Source) ensureGroup(ctx context.Context) error {
	err := s.c.XGroupCreateMkStream(ctx, s.o.Stream, s.o.Group, s.o.Start).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("redisstream: create group %s on %s: %w", s.o.Group, s.o.Stream, err)
	}
	return nil
}

// blockFor is how long a read for new entries may block: block, but no longer than until the
// next delayed copy this source knows of comes due.
func (s *Source) blockFor() time.Duration {
	if !s.durable {
		return s.o.Block
	}
	return delayq.BlockFor(s.o.Block, s.nextDue.Load())
}

// readNew reads up to count new entries (XREADGROUP >); block < 0 does not block.
func (r *reader) readNew(ctx context.Context, count int, block time.Duration) ([]*engine.Delivery, error) {
	s := r.s
	var ds []*engine.Delivery
	c := r.readClient()
	if raw := r.bare(ctx, c); raw != nil {
		var gone []string
		var err error
		if ds, gone, err = raw.readGroup(ctx, s, ">", count, block); err != nil {
			return nil, fmt.Errorf("redisstream: xreadgroup %s: %w", s.o.Stream, err)
		}
		s.ackGone(ctx, gone)
	} else {
		// A Cluster (no read client of its own) or TLS: go-redis reads and parses.
		msgs, err := s.xreadgroup(ctx, c, ">", count, block)
		if err != nil {
			return nil, err
		}
		ds = s.deliveries(msgs)
	}
	if len(ds) == 0 {
		return nil, nil
	}
	var counts countHeaders
	for _, d := range ds {
		switch s.o.Kind {
		case KindClaiming:
			d.Attempt, d.DeliveryCount, d.IdleMS = 1, 0, 0
			counts.set(d)
		case KindReclaim:
			d.Attempt, d.DeliveryCount, d.IdleMS = 1, 1, 0
			counts.set(d)
		}
	}
	s.track.addDeliveries(ds)
	return ds, nil
}

// bare returns the bare read connection (rawRead) of c, the client reads use, setting it up
// first where the held connection has not been: a PING through go-redis dials it and runs the
// handshake (a PING the server refuses, by an ACL, still has). Nil where the source has no
// read client of its own (a Cluster), go-redis could not reach the server (the error comes
// back on the read that follows), or the connection cannot be read bare (TLS; not asked again
// until the connection is dropped).
func (r *reader) bare(ctx context.Context, c redis.Cmdable) *rawRead {
	conn, ok := c.(*redis.Conn)
	if r.raw != nil || r.bareTried || !ok {
		return r.raw
	}
	if err := conn.Ping(ctx).Err(); err != nil && !errors.As(err, new(redis.Error)) {
		return nil
	}
	r.bareTried = true
	if nc := r.dialed.load(); nc != nil {
		o := r.rc.Options()
		r.raw = newRawRead(nc, o.ReadTimeout, o.WriteTimeout)
	}
	return r.raw
}

// dialedConn holds the last connection a read client dialed.
type dialedConn struct {
	mu sync.Mutex
	nc net.Conn
}

func (d *dialedConn) Store(nc net.Conn) {
	d.mu.Lock()
	d.nc = nc
	d.mu.Unlock()
}

func (d *dialedConn) load() net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nc
}

// ackGone acknowledges the ids a read found without data. What the read found besides is
// this consumer's now and is handed over whatever happens here; on an error the ids stay
// pending, for the next pending re-read or claim to acknowledge.
func (s *Source) ackGone(ctx context.Context, gone []string) {
	if err := s.ackDeleted(ctx, gone); err != nil {
		s.log.Warn().Err(err).Msg("pending entries whose data is gone not acknowledged")
	}
}

// readPending reads one page of this consumer's own pending entries (stream kind, SPEC §2):
// those still in flight here are skipped, those whose data was deleted are acknowledged.
func (r *reader) readPending(ctx context.Context, count int) ([]*engine.Delivery, error) {
	s := r.s
	inFlight := s.track.snapshot()
	msgs, err := s.xreadgroup(ctx, s.c, r.cursor, count, -1)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		r.pending, r.cursor = false, "0"
		return nil, nil
	}
	r.cursor = msgs[len(msgs)-1].ID
	keep := msgs[:0]
	var deleted []string
	for _, m := range msgs {
		switch {
		case len(m.Values) == 0:
			deleted = append(deleted, m.ID)
		default:
			if _, busy := inFlight[m.ID]; !busy && !s.track.has(m.ID) {
				keep = append(keep, m)
			}
		}
	}
	if err := s.ackDeleted(ctx, deleted); err != nil {
		return nil, err
	}
	ds := s.deliveries(keep)
	s.track.addDeliveries(ds)
	return ds, nil
}

func (s *Source) xreadgroup(ctx context.Context, c redis.Cmdable, id string, count int, block time.Duration) ([]redis.XMessage, error) {
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group:    s.o.Group,
		Consumer: s.o.Consumer,
		Streams:  []string{s.o.Stream, id},
		Count:    int64(count),
		Block:    block,
	}).Result()
	if isNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redisstream: xreadgroup %s: %w", s.o.Stream, err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	return res[0].Messages, nil
}

// idleArgs is the XPENDING that lists up to count entries idle for min_idle, of any consumer,
// from start on.
func (r *reader) idleArgs(start string, count int) *redis.XPendingExtArgs {
	s := r.s
	return &redis.XPendingExtArgs{
		Stream: s.o.Stream, Group: s.o.Group, Idle: s.o.MinIdle,
		Start: start, End: "+", Count: int64(count),
	}
}

// headerRoom is how many headers the source adds to an entry's own: claiming and reclaim add
// the delivery count and idle time (countHeaders), so the map is sized for them at once.
func (s *Source) headerRoom() int {
	if s.o.Kind != KindStream {
		return 2
	}
	return 0
}

// deliveries maps entries to deliveries, allocated together.
func (s *Source) deliveries(msgs []redis.XMessage) []*engine.Delivery {
	if len(msgs) == 0 {
		return nil
	}
	block := make([]engine.Delivery, len(msgs))
	toks := make(tokens, len(msgs))
	ds := make([]*engine.Delivery, len(msgs))
	extra := s.headerRoom()
	var none sharedNone
	for i, m := range msgs {
		d := &block[i]
		d.Key, d.ID = s.o.Stream, m.ID
		toks.set(d, i)
		codec.DecodeStreamRoom(&d.Message, m.Values, extra)
		none.fill(&d.Message)
		ds[i] = d // the stream kind's attempt is the engine's to number (Capabilities.Number)
	}
	return ds
}

// sharedNone gives the entries of one batch that have no field but the payload (the usual
// entry) one empty headers map between them: a delivery's headers are read-only once received
// (engine.Message), and a map per entry was an allocation on the reader's path, the one path
// every batch waits for.
type sharedNone struct{ m map[string]string }

func (n *sharedNone) fill(m *engine.Message) {
	if m.Headers == nil {
		if n.m == nil {
			n.m = map[string]string{}
		}
		m.Headers = n.m
	}
}

// countHeaders writes x-delivery-count and x-idle-ms (SPEC §6) from deliveries' fields, for
// one batch. Entries with no headers of their own (sharedNone) that follow one another with
// the same count and idle time share one map of the two, for the reason sharedNone does.
type countHeaders struct {
	count  int
	idle   int64
	shared map[string]string
}

func (c *countHeaders) set(d *engine.Delivery) {
	if len(d.Headers) > 0 {
		d.Headers[engine.HeaderDeliveryCount] = strconv.Itoa(d.DeliveryCount)
		d.Headers[engine.HeaderIdleMS] = strconv.FormatInt(d.IdleMS, 10)
		return
	}
	if c.shared == nil || c.count != d.DeliveryCount || c.idle != d.IdleMS {
		c.count, c.idle = d.DeliveryCount, d.IdleMS
		c.shared = map[string]string{
			engine.HeaderDeliveryCount: strconv.Itoa(d.DeliveryCount),
			engine.HeaderIdleMS:        strconv.FormatInt(d.IdleMS, 10),
		}
	}
	d.Headers = c.shared
}

// ackDeleted acknowledges pending ids whose entry data is gone (deleted or trimmed), so they are
// never stuck, and logs them.
func (s *Source) ackDeleted(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.c.XAck(ctx, s.o.Stream, s.o.Group, ids...).Err(); err != nil {
		return fmt.Errorf("redisstream: xack deleted entries on %s: %w", s.o.Stream, err)
	}
	s.track.remove(ids)
	shown := ids
	if len(shown) > 10 {
		shown = shown[:10]
	}
	s.log.Warn().Int("count", len(ids)).Strs("ids", shown).
		Msg("pending entries whose data was deleted or trimmed; acknowledged")
	return nil
}

// moveDue runs the move-back script (SPEC §5) and learns when the next copy is due.
func (s *Source) moveDue(ctx context.Context) error {
	res, err := moveDueScript.Run(ctx, s.c, []string{s.o.DelayKey, s.o.Stream},
		time.Now().UnixMilli(), MoveBatch).Slice()
	if err != nil {
		return fmt.Errorf("redisstream: move due copies from %s: %w", s.o.DelayKey, err)
	}
	if len(res) != 3 {
		return fmt.Errorf("redisstream: move due copies from %s: unexpected reply %v", s.o.DelayKey, res)
	}
	moved, _ := res[0].(int64)
	bad, _ := res[1].(int64)
	if moved > 0 {
		s.log.Debug().Int64("count", moved).Str("delay_key", s.o.DelayKey).Msg("moved due delayed copies back")
	}
	if bad > 0 {
		s.log.Warn().Int64("count", bad).Str("delay_key", s.o.DelayKey).
			Msg("delayed copies that did not decode were moved back as bare payloads")
	}
	sc, _ := res[2].(string)
	s.nextDue.Store(delayq.ParseScore(sc))
	return nil
}
