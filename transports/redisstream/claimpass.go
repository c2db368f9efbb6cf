package redisstream

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
)

// maxPasses is how many claiming passes may be in flight at once. With two, Redis works on one
// pass's XCLAIM while this process parses, converts and hands over the other's, so a takeover
// is bound by the slower of the two rather than by their sum.
const maxPasses = 2

// claimPass is one XCLAIM of chosen candidates, with the XPENDING that lists the next
// candidates riding behind it in the same round trip. run fills in the result; done is closed
// when it has.
type claimPass struct {
	ids   []string
	infos []pendingInfo // infos[i] is what XPENDING said of ids[i]
	asked time.Time     // when the round trip was sent: the listing's age counts from here
	done  chan struct{}

	// listFrom: the pass also lists up to listCount idle entries after this id (exclusive),
	// the candidates of the passes after it; "" for a pass that lists nothing.
	listFrom  string
	listCount int

	// raw: the pass was written on the bare read connection and its replies are read there,
	// after those of prev (the pass sent before it, if any).
	raw  *rawRead
	prev chan struct{}

	ds      []*engine.Delivery // claimed, converted and tracked
	deleted []string           // claimed ids whose entry data is gone (servers before Redis 7)
	next    []candidate
	nextOK  bool
	err     error // the XCLAIM failed: nothing was claimed
}

type pendingInfo struct{ count, idle int64 }

// candidate is an idle entry an XPENDING listed: what a pass needs of redis.XPendingExt, whose
// consumer name and 48 bytes were parsed and allocated for each of a takeover's entries.
type candidate struct {
	ID          string
	count, idle int64 // deliveries so far, and milliseconds idle when listed
}

// candidates keeps what a pass needs of XPENDING's entries (through go-redis).
func candidates(pend []redis.XPendingExt) []candidate {
	if len(pend) == 0 {
		return nil
	}
	out := make([]candidate, len(pend))
	for i, p := range pend {
		out[i] = candidate{p.ID, p.RetryCount, p.Idle.Milliseconds()}
	}
	return out
}

// claimAhead is the claiming kind's pass over idle entries of any consumer (SPEC §2): XPENDING
// IDLE min_idle, then XCLAIM with min_idle, so when two workers race only one wins each id.
//
// The XPENDING that finds the next passes' candidates rides behind a pass's XCLAIM, in one
// round trip, and lists what comes after the candidates already known: a takeover of a long
// backlog costs one round trip per pass, and each idle entry is listed once. Candidates are
// used only while they are younger than min_idle: an entry claimed or read by anyone after its
// XPENDING has been idle for less than that, so XCLAIM's own MIN-IDLE check refuses it, and the
// delivery count the XPENDING reported is still the entry's when XCLAIM succeeds. Idle entries
// before the last listing (one another worker claimed and then left, say) are found by the
// next listing from the start, once the known candidates run out.
//
// Up to maxPasses passes are in flight: it sends what room allows beyond the passes already
// sent, then waits for the oldest and returns what it claimed. Passes are handed over in the
// order they were sent. room is what the engine can take now; passes in flight count against
// it, so reading stays within one batch of the handlers.
func (r *reader) claimAhead(ctx context.Context, room int) ([]*engine.Delivery, error) {
	s := r.s
	if len(r.passes) == 0 {
		if err := r.listIdle(ctx, room); err != nil {
			return nil, err
		}
	} else if time.Since(r.candsAt) >= s.o.MinIdle {
		r.cands = nil // stale; once the passes in flight are done, a listing starts afresh
	}
	size := passSize(s.o.Batch)
	avail := room - r.outstanding()
	for len(r.passes) < maxPasses && len(r.cands) > 0 {
		if len(r.passes) > 0 && avail < size {
			// Wait until the handlers have taken enough for a whole second pass: many small
			// XCLAIMs cost Redis more than they save. The engine still holds what the last
			// pass handed over meanwhile, so the handlers never wait for this.
			room = min(r.feed.RoomFor(ctx, r.outstanding()+size), s.o.Batch)
			if room == 0 { // stopped: the passes in flight are dropped (dropPasses)
				return nil, ctx.Err()
			}
			if avail = room - r.outstanding(); avail < size {
				break
			}
		}
		p := r.newPass(min(avail, size))
		if p == nil {
			break
		}
		avail -= len(p.ids)
		r.sendPass(ctx, p)
	}
	if len(r.passes) == 0 {
		return nil, nil
	}
	p := r.passes[0]
	<-p.done
	r.passes = r.passes[1:]
	return r.finishPass(ctx, p)
}

// listingInFlight reports whether a pass in flight lists the next candidates.
func (r *reader) listingInFlight() bool {
	return slices.ContainsFunc(r.passes, func(p *claimPass) bool { return p.listFrom != "" })
}

// passSize is how many entries a claiming pass asks for: half a batch, so that a second pass
// fits beside the first within one batch of read-ahead.
func passSize(batch int) int { return max((batch+1)/2, 1) }

// listIdle lists up to count idle entries as candidates, unless the last round trip listed
// some that are still young enough to use.
func (r *reader) listIdle(ctx context.Context, count int) error {
	s := r.s
	if len(r.cands) > 0 && time.Since(r.candsAt) < s.o.MinIdle {
		return nil
	}
	asked := time.Now()
	pend, err := s.c.XPendingExt(ctx, r.idleArgs("-", count)).Result()
	if err != nil {
		r.cands = nil
		return fmt.Errorf("redisstream: xpending %s: %w", s.o.Stream, err)
	}
	r.cands, r.candsAt = candidates(pend), asked
	return nil
}

// newPass takes up to count candidates that are not in flight here, and returns the pass that
// claims them; nil when there are none.
//
// No candidate is in a pass already sent: each is taken from the pool once, a listing riding on
// a pass starts after every id known when it was sent, and a listing from the start is made
// only with no pass in flight. Were one ever sent twice, XCLAIM's MIN-IDLE would refuse the
// second claim, since the first reset the entry's idle time (a set of the ids in flight, kept
// for that, cost two map operations a message).
func (r *reader) newPass(count int) *claimPass {
	s := r.s
	p := &claimPass{done: make(chan struct{}), ids: make([]string, 0, count), infos: make([]pendingInfo, 0, count)}
	used := 0
	s.track.lookup(func(has func(id string) bool) {
		for _, c := range r.cands {
			if len(p.ids) == count {
				break
			}
			used++
			if has(c.ID) {
				continue
			}
			p.ids = append(p.ids, c.ID)
			p.infos = append(p.infos, pendingInfo{c.count, c.idle})
		}
	})
	r.cands = r.cands[used:]
	if len(p.ids) == 0 {
		return nil
	}
	// The pass lists the candidates after those known, enough for maxPasses+1 passes, unless
	// a listing is in flight already (whose end is not known yet). One pass more than can be in
	// flight: while this pass and the one sent next are in Redis, the pass that ends first
	// needs candidates for the pass that replaces it, and this listing has not come back then.
	// Listing only maxPasses ran dry every third pass, leaving one pass in flight at a time.
	if want := (maxPasses+1)*passSize(s.o.Batch) - len(r.cands); !r.listingInFlight() && want > 0 {
		last := p.ids[len(p.ids)-1]
		if len(r.cands) > 0 {
			last = r.cands[len(r.cands)-1].ID
		}
		p.listFrom, p.listCount = "("+last, want
	}
	p.asked = time.Now()
	return p
}

// outstanding is how many entries the passes in flight may still hand over.
func (r *reader) outstanding() int {
	n := 0
	for _, p := range r.passes {
		n += len(p.ids)
	}
	return n
}

// sendPass sends p and adds it to the passes in flight. On the source's bare read connection
// (rawRead) where it has one, the commands are written here and the replies read and converted
// in a goroutine, after the pass before it: go-redis's reply built a map and boxed strings for
// every entry. Elsewhere (a Cluster, TLS) runPass sends it through go-redis in a goroutine.
func (r *reader) sendPass(ctx context.Context, p *claimPass) {
	if !r.s.noBare {
		if raw := r.bare(ctx, r.readClient()); raw != nil {
			p.raw = raw
			if n := len(r.passes); n > 0 {
				p.prev = r.passes[n-1].done
			}
			r.passes = append(r.passes, p)
			err := raw.sendClaim(ctx, r.s, p.ids, p.listFrom, p.listCount)
			go r.readPass(p, err)
			return
		}
	}
	r.passes = append(r.passes, p)
	go r.runPass(ctx, p)
}

// readPass reads the replies of a pass sendPass wrote on the bare connection (sent is the
// write's error), once the pass before it has read its own, and converts what it claimed.
func (r *reader) readPass(p *claimPass, sent error) {
	defer close(p.done)
	if p.prev != nil {
		<-p.prev
	}
	s := r.s
	if sent != nil {
		if p.raw.noWrites.Load() {
			p.raw.close() // a write failed; the passes before it have read their replies
		}
		p.err = fmt.Errorf("redisstream: xclaim %s: %w", s.o.Stream, sent)
		return
	}
	ds, gone, listed, listErr, err := p.raw.claimReplies(s, len(p.ids), p.listCount)
	if err != nil {
		p.err = fmt.Errorf("redisstream: xclaim %s: %w", s.o.Stream, err)
		return
	}
	p.next, p.nextOK = listed, listErr == nil
	p.deleted = gone
	r.claimed(p, ds)
}

// waitRawPasses waits for the passes whose replies are read on the bare connection, before
// that connection is given back: what they claimed is then handed over by the next step.
func (r *reader) waitRawPasses() {
	for _, p := range r.passes {
		if p.raw != nil {
			<-p.done
		}
	}
}

// runPass sends p's round trip through go-redis and converts what it claimed. It touches only
// p and the source's tracker, so it may run in a goroutine of its own.
func (r *reader) runPass(ctx context.Context, p *claimPass) {
	defer close(p.done)
	s := r.s
	pipe := s.c.Pipeline()
	cc := pipe.XClaim(ctx, &redis.XClaimArgs{
		Stream: s.o.Stream, Group: s.o.Group, Consumer: s.o.Consumer,
		MinIdle: s.o.MinIdle, Messages: p.ids,
	})
	var next *redis.XPendingExtCmd
	if p.listFrom != "" {
		next = pipe.XPendingExt(ctx, r.idleArgs(p.listFrom, p.listCount))
	}
	_, _ = pipe.Exec(ctx)
	msgs, err := cc.Result()
	if err != nil {
		p.err = fmt.Errorf("redisstream: xclaim %s: %w", s.o.Stream, err)
		return
	}
	if next != nil {
		pend, err := next.Result()
		p.next, p.nextOK = candidates(pend), err == nil
	}
	// The claimed entries are ours now and their delivery counts were raised: from here on
	// they are tracked and handed over, whatever else fails. Redis 7 drops deleted entries
	// from the PEL inside XCLAIM; older servers return them with no fields, and they are
	// acknowledged when the pass is finished.
	keep := msgs[:0]
	for _, m := range msgs {
		if len(m.Values) == 0 {
			p.deleted = append(p.deleted, m.ID)
		} else {
			keep = append(keep, m)
		}
	}
	r.claimed(p, s.deliveries(keep))
}

// claimed numbers the deliveries p claimed from what XPENDING said of them, and tracks them.
func (r *reader) claimed(p *claimPass, ds []*engine.Delivery) {
	s := r.s
	p.ds = ds
	// XCLAIM answers in the order of its ids, leaving out those it refused: each entry is
	// found after the last one (a search from the start only if that ever were not so).
	from := 0
	var headers countHeaders
	for _, d := range p.ds {
		i := slices.Index(p.ids[from:], d.ID)
		if i >= 0 {
			i += from
		} else {
			i = slices.Index(p.ids, d.ID)
		}
		var in pendingInfo
		if i >= 0 {
			in, from = p.infos[i], i+1
		}
		d.DeliveryCount = int(in.count) // deliveries before this one
		d.Attempt = d.DeliveryCount + 1
		d.IdleMS = in.idle
		headers.set(d)
	}
	s.track.addDeliveries(p.ds)
}

// finishPass takes in what a pass that is done listed and claimed, and returns its deliveries.
func (r *reader) finishPass(ctx context.Context, p *claimPass) ([]*engine.Delivery, error) {
	if p.listFrom != "" {
		switch {
		case !p.nextOK:
			r.cands = nil // the next pass lists from the start
		case len(r.cands) == 0:
			r.cands, r.candsAt = p.next, p.asked
		default: // they follow the known ones; the pool is as young as its oldest listing
			r.cands = append(r.cands, p.next...)
		}
		r.noneIdle = len(r.cands) == 0
	}
	if p.err != nil {
		return nil, p.err
	}
	return p.ds, r.s.ackDeleted(ctx, p.deleted)
}

// dropPasses waits for the passes in flight when Receive ends and untracks what they claimed:
// it stays pending in Redis and comes back after min_idle.
func (r *reader) dropPasses() {
	for _, p := range r.passes {
		<-p.done
		ids := make([]string, len(p.ds))
		for i, d := range p.ds {
			ids[i] = d.ID
		}
		r.s.track.remove(ids)
	}
	r.passes = nil
}
