package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest `every`: a schedule is a clock, not a loop, and each tick costs a
// Redis key that lives an hour (see the package doc).
const MinEvery = time.Second

// Clock is when a schedule ticks: a five-field cron expression in a time zone, or a fixed
// interval. Every process computes the same instants from it, whatever its own start time or
// zone, which is what lets processes agree on a tick's key.
type Clock struct {
	cron  cron.Schedule // nil for every
	loc   *time.Location
	every time.Duration
	spec  string // as written, for people
}

// ParseCron parses a standard five-field cron expression (minute hour day-of-month month
// day-of-week), evaluated in loc. Descriptors ("@daily", "@every 1h") and a TZ= prefix are
// refused: `every` and `timezone` say those, so there is one way to write each.
func ParseCron(expr string, loc *time.Location) (Clock, error) {
	e := strings.TrimSpace(expr)
	switch {
	case strings.HasPrefix(e, "@"):
		return Clock{}, fmt.Errorf("%q is a descriptor; cron takes five fields (minute hour day-of-month month day-of-week), and every takes an interval", e)
	case strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ="):
		return Clock{}, errors.New("a time zone goes in timezone, not in cron")
	}
	s, err := cron.ParseStandard(e)
	if err != nil {
		return Clock{}, err
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return Clock{}, fmt.Errorf("%q is not five fields", e)
	}
	spec.Location = loc
	return Clock{cron: spec, loc: loc, spec: e + " " + loc.String()}, nil
}

// Every ticks at whole multiples of d counted from the Unix epoch, so every = "1h" ticks on the
// hour, the same instants in every process.
func Every(d time.Duration) (Clock, error) {
	if d < MinEvery {
		return Clock{}, fmt.Errorf("every must be at least %s", MinEvery)
	}
	return Clock{every: d, spec: "every " + d.String()}, nil
}

// String is the schedule as written: "0 2 * * * Europe/Berlin", "every 30s".
func (c Clock) String() string { return c.spec }

// Next is the first tick strictly after t, in UTC; the zero time when there is none (a cron
// expression that never matches, such as 30 February).
func (c Clock) Next(t time.Time) time.Time {
	if c.cron != nil {
		for {
			n := c.cron.Next(t)
			if n.IsZero() || !c.repeated(n) {
				return n.UTC()
			}
			t = n
		}
	}
	ns := t.UnixNano()
	step := c.every.Nanoseconds()
	next := (ns/step + 1) * step
	if ns < 0 && ns%step != 0 {
		next -= step // division truncates toward zero before the epoch
	}
	return time.Unix(0, next).UTC()
}

// repeated reports whether n's wall-clock time already happened earlier, in the hour that
// the change back from summer time repeats: such a time ticks once, the first time (as cron
// daemons do).
func (c Clock) repeated(n time.Time) bool {
	_, off := n.In(c.loc).Zone()
	_, before := n.Add(-3 * time.Hour).In(c.loc).Zone()
	if before <= off {
		return false
	}
	earlier := n.Add(-time.Duration(before-off) * time.Second)
	const wall = "2006-01-02 15:04:05"
	return earlier.In(c.loc).Format(wall) == n.In(c.loc).Format(wall)
}

// Ticks returns the ticks in (after, upTo], oldest first, at most limit of them (the newest when
// there are more, with dropped counting the others).
func (c Clock) Ticks(after, upTo time.Time, limit int) (ticks []time.Time, dropped int) {
	for t := c.Next(after); !t.IsZero() && !t.After(upTo); t = c.Next(t) {
		ticks = append(ticks, t)
		if len(ticks) > limit {
			ticks = ticks[1:]
			dropped++
		}
	}
	return ticks, dropped
}
