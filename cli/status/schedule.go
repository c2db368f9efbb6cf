package status

import (
	"time"

	"github.com/flowrun/flowrun/transports"
)

// nextTick is a schedule source's next tick after now (SPEC §17), which the pipeline's card
// shows; nil for any other source, and for a cron expression that never matches.
func nextTick(src transports.Config, now time.Time) *time.Time {
	t, ok := src.(transports.Ticker)
	if !ok {
		return nil
	}
	n := t.NextTick(now)
	if n.IsZero() {
		return nil
	}
	return &n
}
