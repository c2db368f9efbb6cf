package engine

import (
	"errors"
	"fmt"
	"strings"
)

// Settlement failures (SPEC §10). A transport reports what went wrong per delivery; the engine
// decides what to do about it: a transient fault is retried with backoff, a permanent one is
// logged once, counted, and that one delivery is left unsettled so it comes back by its source's
// own rules, while every other delivery goes on being settled.

// ErrPermanent marks an error that will not pass by itself (NOPERM, WRONGTYPE, a script error,
// an action the transport cannot do). Wrap it, or return a Fault with Permanent set.
var ErrPermanent = errors.New("permanent")

// Fault is one delivery's settlement failure, as a transport saw it.
type Fault struct {
	Index     int    // into the batch given to Settle
	Command   string // the command that failed, lower case ("xadd", "lrem", "append")
	Key       string // the key it was sent to
	Reason    string // a short metric label: "noperm", "wrongtype", "connection", ...
	Permanent bool
	Err       error // the server's own error, unchanged
}

func (f Fault) Error() string {
	var b strings.Builder
	b.WriteString(f.Command)
	if f.Key != "" {
		b.WriteByte(' ')
		b.WriteString(f.Key)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if f.Err != nil {
		b.WriteString(f.Err.Error())
	} else {
		b.WriteString(f.Reason)
	}
	return b.String()
}

func (f Fault) Unwrap() error { return f.Err }

// SettleError is what Settle returns when some of a batch was not carried out. The deliveries
// not named in Faults are settled and are never sent again; those named are sent again (when
// transient) or abandoned (when permanent). A transport must make a resend harmless: a copy, a
// dead letter or a record that was written is never written twice.
type SettleError struct {
	Faults []Fault
}

func (e *SettleError) Error() string {
	if len(e.Faults) == 1 {
		return "settle: " + e.Faults[0].Error()
	}
	return fmt.Sprintf("settle: %d deliveries failed, first: %v", len(e.Faults), e.Faults[0])
}

// FailedIndexes implements PartialError.
func (e *SettleError) FailedIndexes() []int {
	out := make([]int, len(e.Faults))
	for i, f := range e.Faults {
		out[i] = f.Index
	}
	return out
}

var _ PartialError = (*SettleError)(nil)

// Unwrap gives errors.Is and errors.As every fault.
func (e *SettleError) Unwrap() []error {
	out := make([]error, len(e.Faults))
	for i, f := range e.Faults {
		out[i] = f
	}
	return out
}

// Add records one more fault; a nil *SettleError is fine to call Add on through a pointer.
func (e *SettleError) Add(f Fault) { e.Faults = append(e.Faults, f) }

// Err returns e as an error, or nil when it holds no fault.
func (e *SettleError) Err() error {
	if e == nil || len(e.Faults) == 0 {
		return nil
	}
	return e
}

// Classifier turns a transport's error into a fault reason and says whether it is permanent.
// Transports of one family share one (redisconn.Classify for Redis).
type Classifier func(err error) (reason string, permanent bool)

// classify is the engine's view of an error that arrived without a Fault: ErrUnsupported and
// ErrPermanent are permanent, anything else is transient.
func classify(err error) (string, bool) {
	switch {
	case errors.Is(err, ErrUnsupported):
		return "unsupported", true
	case errors.Is(err, ErrPermanent):
		return "permanent", true
	}
	return "error", false
}

// faultsOf spreads a Settle error over the n deliveries of the call: a SettleError names its
// own; a PartialError names indexes; any other error is a fault of every delivery.
func faultsOf(err error, n int) []Fault {
	if err == nil {
		return nil
	}
	var se *SettleError
	if errors.As(err, &se) {
		out := make([]Fault, 0, len(se.Faults))
		for _, f := range se.Faults {
			if f.Index < 0 || f.Index >= n {
				continue
			}
			if f.Reason == "" {
				f.Reason, f.Permanent = classify(f)
			}
			out = append(out, f)
		}
		return out
	}
	reason, perm := classify(err)
	var idx []int
	var pe PartialError
	if errors.As(err, &pe) {
		idx = pe.FailedIndexes()
	} else {
		idx = make([]int, n)
		for i := range idx {
			idx[i] = i
		}
	}
	out := make([]Fault, 0, len(idx))
	for _, i := range idx {
		if i >= 0 && i < n {
			out = append(out, Fault{Index: i, Reason: reason, Permanent: perm, Err: err})
		}
	}
	return out
}
