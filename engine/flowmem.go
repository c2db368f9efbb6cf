package engine

import (
	"context"
	"strings"
	"sync"
	"time"
)

// MemFlowStore is the in-process FlowStore of file and pipe sources (SPEC §13: within the
// process). It decides exactly as the Redis store's script does.
type MemFlowStore struct {
	mu      sync.Mutex
	now     func() time.Time
	leases  map[string]map[string]time.Time // concurrency key → token → expiry
	starts  map[string][]time.Time          // throttle key → start times, oldest first
	periods map[string]time.Duration        // throttle key → its period
	claims  map[string]memClaim             // dedupe key → claim
	sweep   time.Time
}

type memClaim struct {
	token   string // "" once done
	expires time.Time
}

// NewMemFlowStore returns an empty in-process store.
func NewMemFlowStore() *MemFlowStore {
	return &MemFlowStore{
		now:     time.Now,
		leases:  map[string]map[string]time.Time{},
		starts:  map[string][]time.Time{},
		periods: map[string]time.Duration{},
		claims:  map[string]memClaim{},
	}
}

var _ FlowStore = (*MemFlowStore)(nil)

// Round implements FlowStore.
func (m *MemFlowStore) Round(_ context.Context, r *FlowRound) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.expire(now)
	for _, rel := range r.Releases {
		m.release(rel, now)
	}
	r.Lost = r.Lost[:0]
	for i, l := range r.Renews {
		if !m.renew(l, r.Lease, now) {
			r.Lost = append(r.Lost, i)
		}
	}
	r.Verdicts = r.Verdicts[:0]
	blocked := map[string]bool{}
	admitted := 0
	for _, a := range r.Admits {
		v := FlowVerdict{Kind: FlowWait}
		if admitted < r.Max && !blocked[a.Dedupe] && !blocked[a.Conc] && !blocked[a.Throttle] {
			v = m.verdict(a, now)
		}
		switch v.Kind {
		case FlowAdmitted:
			admitted++
			m.take(a, r.Lease, now)
		case FlowWait:
			// Later deliveries of a key that waits wait too: per key, admission is in order.
			for _, k := range []string{a.Dedupe, a.Conc, a.Throttle} {
				if k != "" {
					blocked[k] = true
				}
			}
		}
		v.RetryIn = max(v.RetryIn, 0)
		r.Verdicts = append(r.Verdicts, v)
	}
	return nil
}

// release lets go of one lease. The done mark is written whoever holds the claim by then (the
// message succeeded, so any copy is a duplicate); a release deletes only its own claim.
func (m *MemFlowStore) release(rel FlowRelease, now time.Time) {
	if rel.Conc != "" {
		delete(m.leases[rel.Conc], rel.Token)
		if len(m.leases[rel.Conc]) == 0 {
			delete(m.leases, rel.Conc)
		}
	}
	if c, ok := m.claims[rel.Dedupe]; rel.Dedupe != "" && rel.Window > 0 {
		// Kept for the window: a key of its own, not a slice of the admission's keys and token
		// (flowAdmitSeq). The assignment replaces the map's key with it.
		m.claims[strings.Clone(rel.Dedupe)] = memClaim{expires: now.Add(rel.Window)}
	} else if rel.Dedupe != "" && ok && c.token == rel.Token && c.expires.After(now) {
		delete(m.claims, rel.Dedupe)
	}
}

// renew extends one running delivery's lease and claim; false when either was gone.
func (m *MemFlowStore) renew(l FlowLease, lease time.Duration, now time.Time) bool {
	ok := true
	if l.Conc != "" {
		if _, held := m.leases[l.Conc][l.Token]; held {
			m.leases[l.Conc][l.Token] = now.Add(lease)
		} else {
			ok = false
		}
	}
	if l.Dedupe != "" {
		if c, held := m.claims[l.Dedupe]; held && c.token == l.Token && c.expires.After(now) {
			m.claims[l.Dedupe] = memClaim{token: l.Token, expires: now.Add(lease)}
		} else {
			ok = false
		}
	}
	return ok
}

// verdict decides one admission by its keys, in the script's order: the dedupe claim (a
// duplicate is known as one without waiting for its other keys), the concurrency key, the
// throttle. It takes nothing (take does).
func (m *MemFlowStore) verdict(a FlowAdmit, now time.Time) FlowVerdict {
	if a.Dedupe != "" {
		if c, ok := m.claims[a.Dedupe]; ok && c.expires.After(now) {
			if c.token == "" {
				return FlowVerdict{Kind: FlowDuplicate}
			}
			return FlowVerdict{Kind: FlowWait, RetryIn: c.expires.Sub(now)}
		}
	}
	if a.Conc != "" && len(m.leases[a.Conc]) >= a.ConcLimit {
		first := time.Time{}
		for _, exp := range m.leases[a.Conc] {
			if first.IsZero() || exp.Before(first) {
				first = exp
			}
		}
		return FlowVerdict{Kind: FlowWait, RetryIn: first.Sub(now)}
	}
	if a.Throttle != "" {
		s := m.starts[a.Throttle]
		cut := 0
		for cut < len(s) && !s[cut].After(now.Add(-a.Period)) {
			cut++
		}
		s = s[cut:]
		m.starts[a.Throttle] = s
		if len(s) >= a.ThrottleLimit {
			return FlowVerdict{Kind: FlowWait, RetryIn: s[0].Add(a.Period).Sub(now)}
		}
	}
	return FlowVerdict{Kind: FlowAdmitted}
}

// take takes an admitted delivery's claim and lease and counts its throttle start.
func (m *MemFlowStore) take(a FlowAdmit, lease time.Duration, now time.Time) {
	if a.Dedupe != "" {
		m.claims[a.Dedupe] = memClaim{token: a.Token, expires: now.Add(lease)}
	}
	if a.Conc != "" {
		if m.leases[a.Conc] == nil {
			m.leases[a.Conc] = map[string]time.Time{}
		}
		m.leases[a.Conc][a.Token] = now.Add(lease)
	}
	if a.Throttle != "" {
		m.starts[a.Throttle] = append(m.starts[a.Throttle], now)
		m.periods[a.Throttle] = a.Period
	}
}

// expire drops what has run out: leases past their expiry at every round (a crashed holder
// never blocks longer than its lease); claims and throttle keys at most once a second.
func (m *MemFlowStore) expire(now time.Time) {
	for k, ls := range m.leases {
		for tok, exp := range ls {
			if !exp.After(now) {
				delete(ls, tok)
			}
		}
		if len(ls) == 0 {
			delete(m.leases, k)
		}
	}
	if now.Sub(m.sweep) < time.Second {
		return
	}
	m.sweep = now
	for k, c := range m.claims {
		if !c.expires.After(now) {
			delete(m.claims, k)
		}
	}
	for k, s := range m.starts {
		if len(s) == 0 || !s[len(s)-1].Add(m.periods[k]).After(now) {
			delete(m.starts, k)
			delete(m.periods, k)
		}
	}
}
