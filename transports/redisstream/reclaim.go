package redisstream

// The reclaim kind's pass (SPEC §2): XAUTOCLAIM, then the delivery counts of what it claimed.

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
)

// autoClaim is the reclaim kind's pass (SPEC §2): XAUTOCLAIM min_idle from the kept cursor,
// acknowledging ids it reports deleted, then one XPENDING over the claimed range to learn the
// delivery counts (which now include this delivery).
//
// XAUTOCLAIM has raised the counts of what it claimed, so a failure after it must not lose
// those entries (they would come back after min_idle as one more attempt): they are tracked at
// once, which keeps them alive and out of other claims, and carried to the next step, which
// learns their counts before it claims anything else.
func (r *reader) autoClaim(ctx context.Context, count int) ([]*engine.Delivery, error) {
	s := r.s
	if len(r.carry) > 0 {
		return r.countCarried(ctx, nil)
	}
	// Only while the last pass claimed something (a takeover): a pass over a fresh backlog
	// usually claims nothing, and its XPENDING would list every entry in flight here for
	// nothing; the first pass that does claim learns its counts in a second round trip.
	pending := 0
	if r.claimedLast {
		pending = count + s.track.len() + 16
	}
	next, ds, deleted, known, err := r.autoClaimTrip(ctx, count, pending)
	if err != nil {
		return nil, fmt.Errorf("redisstream: xautoclaim %s: %w", s.o.Stream, err)
	}
	r.autoclaim = next
	if next == "" {
		r.autoclaim = "0-0"
	}
	// An entry still in flight here is not run twice (its keep-alive lagged); the others are
	// ours now, tracked and carried until their delivery counts are known.
	r.carry = s.track.addUntracked(ds)
	r.claimedLast = len(r.carry) > 0
	claimed, err := r.countCarried(ctx, known)
	if err != nil {
		return nil, err
	}
	return claimed, s.ackDeleted(ctx, deleted)
}

// autoClaimTrip sends XAUTOCLAIM from the cursor and, with pending > 0, the XPENDING that
// learns the counts right behind it, in one round trip: this consumer's pending entries from
// the cursor on (up to pending), which include what it just claimed unless its own in-flight
// entries crowd them out of the page (then countCarried asks again for the rest). On the
// source's bare read connection where it has one (rawRead), else through go-redis on the
// shared client. deleted holds the ids whose data is gone.
func (r *reader) autoClaimTrip(ctx context.Context, count, pending int) (next string, ds []*engine.Delivery, deleted []string, known []redis.XPendingExt, err error) {
	s := r.s
	if raw := r.bare(ctx, r.readClient()); raw != nil {
		return raw.autoClaim(ctx, s, r.autoclaim, count, pending)
	}
	pipe := s.c.Pipeline()
	ac := pipe.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream: s.o.Stream, Group: s.o.Group, Consumer: s.o.Consumer,
		MinIdle: s.o.MinIdle, Start: r.autoclaim, Count: int64(count),
	})
	var pc *redis.XPendingExtCmd
	if pending > 0 {
		pc = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: s.o.Stream, Group: s.o.Group, Start: r.autoclaim, End: "+",
			Count: int64(pending), Consumer: s.o.Consumer,
		})
	}
	_, _ = pipe.Exec(ctx)
	msgs, next, deleted, err := ac.Result()
	if err != nil {
		return "", nil, nil, nil, err
	}
	keep := msgs[:0]
	for _, m := range msgs {
		if len(m.Values) == 0 { // data gone, on servers before 7 (7 lists it in deleted)
			deleted = append(deleted, m.ID)
		} else {
			keep = append(keep, m)
		}
	}
	if pc != nil {
		known, _ = pc.Result() // on an error countCarried asks again
	}
	return next, s.deliveries(keep), deleted, known, nil
}

// countCarried learns the delivery counts of the carried entries and returns them as
// deliveries; on an error they stay carried (and tracked) for the next step. known is a page
// of XPENDING from the same round trip as the XAUTOCLAIM (in id order, as the entries are):
// only entries missing from it are asked for again.
func (r *reader) countCarried(ctx context.Context, known []redis.XPendingExt) ([]*engine.Delivery, error) {
	s := r.s
	if len(r.carry) == 0 {
		return nil, nil
	}
	counts := make([]int64, len(r.carry))
	var missing []*engine.Delivery
	from := 0
	for i, d := range r.carry {
		// Both lists are in id order: each entry is found after the last one found.
		k := slices.IndexFunc(known[from:], func(p redis.XPendingExt) bool { return p.ID == d.ID })
		if k < 0 {
			counts[i] = -1
			missing = append(missing, d)
			continue
		}
		counts[i], from = known[from+k].RetryCount, from+k+1
	}
	if len(missing) > 0 {
		more, err := s.pendingCounts(ctx, missing)
		if err != nil {
			return nil, err
		}
		for i, d := range r.carry {
			if n, ok := more[d.ID]; ok && counts[i] < 0 {
				counts[i] = n
			}
		}
	}
	idle := s.o.MinIdle.Milliseconds() // a lower bound: XAUTOCLAIM reset the idle time
	out := make([]*engine.Delivery, 0, len(r.carry))
	var gone []string
	var headers countHeaders
	for i, d := range r.carry {
		if counts[i] < 0 {
			// Not pending for us any more: settled elsewhere between the two commands, or the
			// data is gone (a restarted Redis).
			s.log.Debug().Str("id", d.ID).Msg("reclaimed entry no longer pending; skipped")
			gone = append(gone, d.ID)
			continue
		}
		d.DeliveryCount = int(counts[i])
		d.Attempt = d.DeliveryCount
		d.IdleMS = idle
		headers.set(d)
		out = append(out, d)
	}
	r.carry = nil
	s.track.remove(gone)
	return out, nil
}

// dropCarry untracks carried entries when Receive ends: they stay pending in Redis and come
// back after min_idle.
func (r *reader) dropCarry() {
	ids := make([]string, len(r.carry))
	for i, d := range r.carry {
		ids[i] = d.ID
	}
	r.s.track.remove(ids)
	r.carry = nil
}

// pendingCounts learns the delivery counts of just-claimed entries with one XPENDING over
// their id range for this consumer. Entries of ours in the same range that are not idle can
// crowd the reply; then further pages follow (rare: a restarted consumer's old backlog).
func (s *Source) pendingCounts(ctx context.Context, ds []*engine.Delivery) (map[string]int64, error) {
	want := make(map[string]bool, len(ds))
	for _, d := range ds {
		want[d.ID] = true
	}
	counts := make(map[string]int64, len(ds))
	start, end := ds[0].ID, ds[len(ds)-1].ID
	pageSize := int64(len(ds) + s.track.len() + 16)
	for {
		pend, err := s.c.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: s.o.Stream, Group: s.o.Group, Start: start, End: end,
			Count: pageSize, Consumer: s.o.Consumer,
		}).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstream: xpending %s: %w", s.o.Stream, err)
		}
		for _, p := range pend {
			if want[p.ID] {
				counts[p.ID] = p.RetryCount
			}
		}
		if len(counts) == len(want) || int64(len(pend)) < pageSize {
			return counts, nil
		}
		start = "(" + pend[len(pend)-1].ID
	}
}
