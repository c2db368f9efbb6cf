// Package faultlog decides which of many like failures reach the log: the first of each key in an
// interval is logged, the rest are counted, and the next line logged for that key says how many
// were not. Every "log once per pipeline, command, key and reason" rule of flowrun (permanent
// settlement faults, refused writes, flow-control store faults, run-time rule errors) goes
// through one Log, so a Redis that refuses every write yields a line per interval, not a line per
// message.
package faultlog

import (
	"sync"
	"time"
)

// DefaultMax bounds the keys one Log remembers. Keys come from configuration and Redis replies
// (commands, keys, reasons), so they are few in practice; the bound keeps a hostile stream of
// distinct reasons from growing the map without end.
const DefaultMax = 4096

// Log remembers, per key, when it last let a line through and how many occurrences it held back
// since. It is safe for concurrent use.
type Log[K comparable] struct {
	mu       sync.Mutex
	interval time.Duration
	max      int
	seen     map[K]*entry
}

type entry struct {
	last       time.Time
	suppressed int
}

// New returns a Log that lets one line per key through per interval. An interval of 0 lets the
// first occurrence of each key through and no other, for the life of the Log.
func New[K comparable](interval time.Duration) *Log[K] {
	return &Log[K]{interval: interval, max: DefaultMax, seen: make(map[K]*entry)}
}

// Note records one occurrence of k at now. It reports whether this occurrence is to be logged
// and, when it is, how many occurrences of k were held back since the last one logged.
func (l *Log[K]) Note(k K, now time.Time) (logIt bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.seen[k]
	if !ok {
		if len(l.seen) >= l.max && !l.evictLocked(now) {
			// Full of keys still within their interval: log, but do not remember, so a flood of
			// distinct keys costs lines rather than memory.
			return true, 0
		}
		l.seen[k] = &entry{last: now}
		return true, 0
	}
	if l.interval > 0 && now.Sub(e.last) >= l.interval {
		n := e.suppressed
		e.last, e.suppressed = now, 0
		return true, n
	}
	e.suppressed++
	return false, 0
}

// Suppressed returns how many occurrences of k are held back now (for a summary line).
func (l *Log[K]) Suppressed(k K) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.seen[k]; ok {
		return e.suppressed
	}
	return 0
}

// Forget drops k, so its next occurrence is logged (a fault that has cleared).
func (l *Log[K]) Forget(k K) {
	l.mu.Lock()
	delete(l.seen, k)
	l.mu.Unlock()
}

// evictLocked drops the keys whose interval has passed with nothing held back; it reports
// whether any room was made.
func (l *Log[K]) evictLocked(now time.Time) bool {
	if l.interval <= 0 {
		return false
	}
	freed := false
	for k, e := range l.seen {
		if e.suppressed == 0 && now.Sub(e.last) >= l.interval {
			delete(l.seen, k)
			freed = true
		}
	}
	return freed
}
