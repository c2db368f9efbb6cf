package engine

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// Policy turns an outcome into a settlement. It is SPEC §4's table and §5's rules in one place;
// what a transport can do comes from its Capabilities, never from its kind.
type Policy struct {
	MaxAttempts int    // 0: no cap
	DeadLetter  string // "": none
	Caps        Capabilities
}

// Decision is what happens to one delivery.
type Decision struct {
	Settlement Settlement
	// Hold is a runtime delayed copy the engine keeps until HoldDue, then requeues.
	Hold    *Message
	HoldDue time.Time
	// Note explains a decision that a user should see in the logs ("rejected", "unsupported").
	Note string
	// Label is the outcome as counted in metrics and logs.
	Label Label

	// Emits are the handler's messages, written by the settler before the settlement; Cause is
	// the handler's error, kept for the log line. Neither is the policy's business: they ride
	// along so that a decision is logged and counted once its emits are known to be written.
	Emits []Emit
	Cause error
	// Span is the delivery's consumer span when the pipeline traces (SPEC §14); the settler
	// ends it once the settlement is final.
	Span Span
}

// Before is checked before a handler runs: a delivery whose attempt is already past the cap
// (it crashed N workers, or was left pending N times) goes straight to the dead letter.
func (p Policy) Before(d *Delivery, now time.Time) (Decision, bool) {
	if !p.pastCap(d) {
		return Decision{}, false
	}
	reason := fmt.Sprintf("attempt %d exceeds max_attempts %d", d.Attempt, p.MaxAttempts)
	return p.deadLetter(d, reason, now), true
}

// pastCap reports whether d's attempt is past the cap (Before decides it): the check alone, for
// a caller that would otherwise copy the policy and a zero Decision per delivery to learn no.
func (p *Policy) pastCap(d *Delivery) bool { return p.MaxAttempts > 0 && d.Attempt > p.MaxAttempts }

// Decide settles a delivery whose handler returned o. cause is the handler's error, if any,
// kept for the dead-letter reason.
func (p Policy) Decide(d *Delivery, o Outcome, cause error, now time.Time) Decision {
	switch o.Kind {
	case KindAck, KindDrop:
		return Decision{Settlement: Settlement{Delivery: d, Action: ActAck}, Label: kindLabel(o.Kind)}
	case KindDeadLetter:
		return p.deadLetter(d, o.Reason, now)
	}

	// retry or retry_after: the cap first.
	if p.MaxAttempts > 0 && d.Attempt >= p.MaxAttempts {
		reason := fmt.Sprintf("max_attempts %d reached", p.MaxAttempts)
		if cause != nil {
			reason += ": " + cause.Error()
		}
		return p.deadLetter(d, reason, now)
	}
	label := kindLabel(o.Kind)

	if p.Caps.RetryInPlace {
		// Claiming and reclaim: the entry stays pending and comes back once idle ≥ min_idle.
		// A longer delay is honoured by keeping it from looking idle until d − min_idle.
		s := Settlement{Delivery: d, Action: ActLeave}
		if o.Kind == KindRetryAfter && o.Delay > p.Caps.MinIdle {
			s.HoldUntil = now.Add(o.Delay - p.Caps.MinIdle)
		}
		return Decision{Settlement: s, Label: label}
	}

	if o.Kind == KindRetryAfter {
		if p.Caps.DurableDelay {
			return Decision{Settlement: Settlement{Delivery: d, Action: ActDelay, Copy: d.RetryCopy(), Due: now.Add(o.Delay)}, Label: label}
		}
		// Runtime delay: settle the original now, hold the copy in the process. The copy owns
		// its payload: a source may read many deliveries' payloads into one shared block, which
		// a copy held for minutes would otherwise keep whole.
		hold := d.RetryCopy()
		hold.Payload = bytes.Clone(hold.Payload)
		return Decision{
			Settlement: Settlement{Delivery: d, Action: ActAck},
			Hold:       hold,
			HoldDue:    now.Add(o.Delay),
			Label:      label,
		}
	}

	// A bare retry. Forms without acknowledgement take a copy only under a declared cap or
	// dead letter, since an uncapped immediate copy of a failing message would loop forever.
	if p.Caps.Ack || p.MaxAttempts > 0 || p.DeadLetter != "" {
		return Decision{Settlement: Settlement{Delivery: d, Action: ActRequeue, Copy: d.RetryCopy()}, Label: label}
	}
	return Decision{
		Settlement: Settlement{Delivery: d, Action: ActAck},
		Label:      label,
		Note:       "retry unsupported on this source without max_attempts or dead_letter; message not retried",
	}
}

// deadLetter sends d to the dead letter, or, without one, acknowledges it as rejected.
func (p Policy) deadLetter(d *Delivery, reason string, now time.Time) Decision {
	if p.DeadLetter == "" {
		return Decision{
			Settlement: Settlement{Delivery: d, Action: ActAck},
			Label:      OutcomeRejected,
			Note:       "rejected: " + reason,
		}
	}
	c := d.Message.Clone()
	c.Key = p.DeadLetter
	c.ID = ""
	c.Headers[HeaderDeadLetterReason] = reason
	c.Headers[HeaderOriginalKey] = d.Key
	if d.ID != "" {
		c.Headers[HeaderOriginalID] = d.ID
	}
	c.Headers[HeaderAttempts] = strconv.Itoa(d.Attempt)
	c.Headers[HeaderFailedAt] = now.UTC().Format(time.RFC3339)
	return Decision{
		Settlement: Settlement{Delivery: d, Action: ActDeadLetter, Copy: c, DeadLetterKey: p.DeadLetter},
		Label:      OutcomeDeadLetter,
		Note:       reason,
	}
}
