package engine

import (
	"fmt"
	"time"
)

// Kind is the closed set of outcomes a handler can return.
type Kind uint8

const (
	KindAck Kind = iota
	KindDrop
	KindRetry
	KindRetryAfter
	// KindDeadLetter is for Go handlers that know a message can never succeed (an HTTP 400, an
	// exec exit 1): it goes to the dead letter at once, with Reason.
	KindDeadLetter
)

func (k Kind) String() string {
	switch k {
	case KindAck:
		return "ack"
	case KindDrop:
		return "drop"
	case KindRetry:
		return "retry"
	case KindRetryAfter:
		return "retry_after"
	case KindDeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Outcome is what a handler decided for one delivery.
type Outcome struct {
	Kind   Kind
	Delay  time.Duration // KindRetryAfter only
	Reason string        // KindDeadLetter: why; goes into x-dead-letter-reason
}

func Ack() Outcome                       { return Outcome{Kind: KindAck} }
func Drop() Outcome                      { return Outcome{Kind: KindDrop} }
func Retry() Outcome                     { return Outcome{Kind: KindRetry} }
func RetryAfter(d time.Duration) Outcome { return Outcome{Kind: KindRetryAfter, Delay: d} }
func DeadLetter(reason string) Outcome   { return Outcome{Kind: KindDeadLetter, Reason: reason} }

func (o Outcome) String() string {
	switch o.Kind {
	case KindRetryAfter:
		return fmt.Sprintf("retry_after(%s)", o.Delay)
	case KindDeadLetter:
		return fmt.Sprintf("dead_letter(%q)", o.Reason)
	}
	return o.Kind.String()
}
