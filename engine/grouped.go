package engine

import (
	"errors"
	"time"

	"github.com/rs/zerolog"
)

// GroupedError is a handler error that many deliveries share, such as a rule's expression failing
// the same way on every payload of a type it did not expect. ErrorGroup names the group (for
// rules: the rule, the part and the reason, without the values) and a metric label (the rule).
// The engine logs the first delivery of each group per progress interval, with how many like it
// it held back since, counts every one (RuleErrorCounter), and logs the rest at debug: never a
// warning per message.
type GroupedError interface {
	error
	ErrorGroup() (group, label string)
}

// RuleErrorCounter is implemented by PipelineMetrics that count grouped handler errors per
// delivery: flowrun_rule_errors_total{pipeline,rule}.
type RuleErrorCounter interface {
	RuleError(rule string)
}

// groupedEvent counts a delivery whose handler failed with a GroupedError and returns the event
// to log it with: a warning with the count held back for the first of its group per interval,
// else debug. ok is false when err is not grouped.
func (r *runner) groupedEvent(err error, dec *Decision) (ev *zerolog.Event, ok bool) {
	if err == nil {
		return nil, false // before g, which errors.As moves to the heap: no allocation per ack
	}
	var g GroupedError
	if !errors.As(err, &g) {
		return nil, false
	}
	group, label := g.ErrorGroup()
	if c, ok := r.metrics.(RuleErrorCounter); ok {
		c.RuleError(label)
	}
	logIt, suppressed := r.grouped.Note(group, time.Now())
	switch {
	case logIt:
		return r.log.Warn().Err(err).Int("suppressed", suppressed), true
	case dec.Label == OutcomeDeadLetter:
		return r.log.Warn().Err(err), true
	}
	return r.log.Debug().Err(err), true
}
