package plugins

import (
	"errors"
	"fmt"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// Outcome is what a handler decided for one delivery, made by Ack, Drop, Retry, RetryAfter or
// DeadLetter. The zero Outcome is no decision: a handler that returns it without an error has
// failed, and the delivery is retried and the mistake logged; it is never acknowledged.
// Outcomes compare with ==.
type Outcome struct {
	kind   outcomeKind
	delay  time.Duration
	reason string
}

type outcomeKind uint8

const (
	outcomeNone outcomeKind = iota // the zero Outcome
	outcomeAck
	outcomeDrop
	outcomeRetry
	outcomeRetryAfter
	outcomeDeadLetter
)

// Ack settles the delivery as done.
func Ack() Outcome { return Outcome{kind: outcomeAck} }

// Drop settles the delivery as done, deliberately ignored (counted apart from acks).
func Drop() Outcome { return Outcome{kind: outcomeDrop} }

// Retry has the delivery tried again now. Retries count against the pipeline's max_attempts:
// the attempt that reaches it goes to the dead letter instead (SPEC §5).
func Retry() Outcome { return Outcome{kind: outcomeRetry} }

// RetryAfter has the delivery tried again after d (a negative d counts as 0), like Retry
// otherwise. Backoff computes a d that grows with the attempt.
func RetryAfter(d time.Duration) Outcome {
	return Outcome{kind: outcomeRetryAfter, delay: max(d, 0)}
}

// DeadLetter sends the delivery straight to the pipeline's dead_letter, whatever the attempt,
// with reason in its x-dead-letter-reason header: for a message that can never succeed. Without
// a dead_letter it is acknowledged and logged as rejected.
func DeadLetter(reason string) Outcome {
	return Outcome{kind: outcomeDeadLetter, reason: reason}
}

// Delay is the delay of a RetryAfter outcome, 0 for any other.
func (o Outcome) Delay() time.Duration { return o.delay }

// Reason is the reason of a DeadLetter outcome, "" for any other.
func (o Outcome) Reason() string { return o.reason }

// String is the outcome as a rule would write it: ack, drop, retry, retry_after(5s),
// dead_letter("reason"); the zero Outcome is "none".
func (o Outcome) String() string {
	switch o.kind {
	case outcomeNone:
		return "none"
	case outcomeRetryAfter:
		return fmt.Sprintf("retry_after(%s)", o.delay)
	case outcomeDeadLetter:
		return fmt.Sprintf("dead_letter(%q)", o.reason)
	}
	return o.engine().String()
}

// engine is the engine's form of o; the zero Outcome, which the adapter never passes on, is a
// retry.
func (o Outcome) engine() engine.Outcome {
	switch o.kind {
	case outcomeAck:
		return engine.Ack()
	case outcomeDrop:
		return engine.Drop()
	case outcomeRetryAfter:
		return engine.RetryAfter(o.delay)
	case outcomeDeadLetter:
		return engine.DeadLetter(o.reason)
	}
	return engine.Retry()
}

// errNoOutcome is the failure of a handler that returned the zero Outcome and no error.
var errNoOutcome = errors.New("handler returned no outcome (the zero plugins.Outcome): " +
	"return plugins.Ack(), Drop(), Retry(), RetryAfter(d) or DeadLetter(reason)")
