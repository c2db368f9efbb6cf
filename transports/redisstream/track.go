package redisstream

import (
	"sync"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// tracker is the set of entry ids this source has read and not yet settled: a stream source's
// pending re-read skips them, a claiming source does not claim them again, and claiming/reclaim
// keep them from looking idle. An ActLeave'd id stays until its hold time.
type tracker struct {
	mu   sync.Mutex
	m    map[string]tracked
	base time.Time // the zero of the tracked times (clock), read with its monotonic clock
}

// tracked holds no pointer and no time.Time (24 bytes and a pointer each): the map, sized
// generously (trackRoom), is then half as large, and what the collector scans of it is its keys.
type tracked struct {
	at   int64 // clock of when it was read or claimed (Redis's idle time started before); with held, of the hold's end
	held bool  // set by ActLeave: no handler has it, it is kept alive until at
	lost bool  // keep-alive found another consumer owning it (logged once)
}

// trackRoom is how many ids per entry of a read's batch the tracker's map has room for from
// the start. A takeover keeps up to about three batches tracked while ids come and go at its
// full rate; Go's map reuses a deleted slot only after a scan of its table once the table is
// out of room, so a map sized for what is tracked spent most of its inserts on those scans:
// 8x keeps each table sparse enough that they are rare (an insert, lookup and delete a message
// measured 96 -> 57 ns with ~1500 ids tracked).
const trackRoom = 8

// newTracker returns an empty tracker for a source reading batch entries at a time.
func newTracker(batch int) *tracker {
	return &tracker{m: make(map[string]tracked, trackRoom*max(batch, 1)), base: time.Now()}
}

// clock is tm as nanoseconds since the tracker's base.
func (t *tracker) clock(tm time.Time) int64 { return int64(tm.Sub(t.base)) }

// addDeliveries adds the ids of ds, with no list of them built first.
func (t *tracker) addDeliveries(ds []*engine.Delivery) {
	now := t.clock(time.Now())
	t.mu.Lock()
	for _, d := range ds {
		t.m[d.ID] = tracked{at: now}
	}
	t.mu.Unlock()
}

// addUntracked adds the deliveries not tracked yet and returns them (in ds's array), under one
// lock for a whole claim pass.
func (t *tracker) addUntracked(ds []*engine.Delivery) []*engine.Delivery {
	now := t.clock(time.Now())
	out := ds[:0]
	t.mu.Lock()
	for _, d := range ds {
		if _, ok := t.m[d.ID]; !ok {
			t.m[d.ID] = tracked{at: now}
			out = append(out, d)
		}
	}
	t.mu.Unlock()
	return out
}

// lookup runs f under one lock with has, which reports whether an id is tracked: a claiming
// pass checks its candidates with one lock rather than one each.
func (t *tracker) lookup(f func(has func(id string) bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(func(id string) bool {
		_, ok := t.m[id]
		return ok
	})
}

func (t *tracker) has(id string) bool {
	t.mu.Lock()
	_, ok := t.m[id]
	t.mu.Unlock()
	return ok
}

func (t *tracker) remove(ids []string) {
	if len(ids) == 0 {
		return
	}
	t.mu.Lock()
	for _, id := range ids {
		delete(t.m, id)
	}
	t.mu.Unlock()
}

// removeSettled removes the ids of batch's settlements at done, under one lock, with no list of
// them built first.
func (t *tracker) removeSettled(batch []engine.Settlement, done []int) {
	if len(done) == 0 {
		return
	}
	t.mu.Lock()
	for _, i := range done {
		delete(t.m, tokenID(batch[i].Delivery))
	}
	t.mu.Unlock()
}

// hold keeps id alive until until; a past or zero until releases it at once.
func (t *tracker) hold(id string, until, now time.Time) {
	t.mu.Lock()
	if until.After(now) {
		t.m[id] = tracked{at: t.clock(until), held: true}
	} else {
		delete(t.m, id)
	}
	t.mu.Unlock()
}

// snapshot copies the tracked ids. A pending re-read filters with the set as it was before its
// XREADGROUP: an id settled while the read ran is then not mistaken for a stranded one.
func (t *tracker) snapshot() map[string]struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := make(map[string]struct{}, len(t.m))
	for id := range t.m {
		m[id] = struct{}{}
	}
	return m
}

func (t *tracker) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// alive returns the ids to keep from looking idle, dropping holds that have run out. An
// in-flight id read or claimed less than fresh ago is left out: its idle time is younger than
// that, so Redis has nothing to reset yet (a takeover settles most entries well within it).
func (t *tracker) alive(now time.Time, fresh time.Duration) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.m))
	n := t.clock(now)
	for id, e := range t.m {
		switch {
		case e.held && e.at <= n:
			// One last refresh at or after the hold's end: idle then counts from there, so the
			// entry never comes back before its delay (SPEC §4).
			delete(t.m, id)
			if !e.lost {
				ids = append(ids, id)
			}
		case !e.lost && !e.held && n-e.at < int64(fresh):
			// young: next time
		case !e.lost:
			ids = append(ids, id)
		}
	}
	return ids
}

// gone handles ids the keep-alive found no longer pending: a held one is released (nothing
// left to hold); an in-flight one stays until its settlement.
func (t *tracker) gone(ids []string) {
	t.mu.Lock()
	for _, id := range ids {
		if e, ok := t.m[id]; ok && e.held {
			delete(t.m, id)
		}
	}
	t.mu.Unlock()
}

// lose marks ids another consumer now owns. A held one is released; an in-flight one stays for
// its settlement but is no longer kept alive. It returns the in-flight ids newly marked, so
// each is logged once.
func (t *tracker) lose(ids []string) []string {
	var newly []string
	t.mu.Lock()
	for _, id := range ids {
		e, ok := t.m[id]
		switch {
		case !ok:
		case e.held:
			delete(t.m, id)
		case !e.lost:
			e.lost = true
			t.m[id] = e
			newly = append(newly, id)
		}
	}
	t.mu.Unlock()
	return newly
}
