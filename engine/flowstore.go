package engine

import (
	"context"
	"time"
)

// Flow is a pipeline's per-key flow control (SPEC §13). Any of the three blocks may be nil.
type Flow struct {
	Concurrency *ConcurrencyKey
	Throttle    *Throttle
	Dedupe      *Dedupe
	// Lease is how long a running delivery's concurrency lease and dedupe claim live without a
	// renewal; they are renewed every Lease/3 while the handler runs and released at once when
	// it finishes, so a crashed process blocks a key for at most Lease. 0: DefaultLease.
	Lease time.Duration
	// Store keeps the shared state: Redis for Redis sources, in-process for the others. nil:
	// in-process.
	Store FlowStore
}

// DefaultLease is Flow.Lease when unset.
const DefaultLease = 30 * time.Second

// KeyFunc computes a flow-control key value from a delivery (a compiled expression).
type KeyFunc interface {
	FlowKey(d *Delivery) (string, error)
}

// ConcurrencyKey is `concurrency_key {}`: at most Limit handlers at once per key value.
type ConcurrencyKey struct {
	Key   KeyFunc
	Limit int
}

// Throttle is `throttle {}`: at most Limit handler starts per Period, per key value when Key is
// set.
type Throttle struct {
	Key    KeyFunc // nil: one budget for the whole pipeline
	Limit  int
	Period time.Duration
}

// Dedupe is `dedupe {}`: a message whose key already succeeded within Window is not handled
// again.
type Dedupe struct {
	Key    KeyFunc
	Window time.Duration
}

// FlowStore keeps flow-control state and decides admissions. Round is one atomic step: the
// releases, then the renewals, then the admissions in order. Keys are the engine's names for a
// key value ("c:<value>", "t:<value>", "t", "d:<value>"); "" means none. A store shared
// between processes (Redis) prefixes them with the pipeline's own namespace.
//
// Failures (SPEC §10 "Settlement failures"): a failure that may pass by itself (a lost
// connection, LOADING, a failover) fails the whole Round, which the engine sends again after a
// backoff, so every part of a round must be harmless to send twice. A failure that will not
// pass (NOPERM, WRONGTYPE, a script error) is reported per release, renewal or admission in the
// round's Faults while the rest of the round is carried out: one key that can never be written
// never stalls the others. A Round error that is an engine.Fault says why it failed.
type FlowStore interface {
	Round(ctx context.Context, r *FlowRound) error
}

// FlowRound is one step of a FlowStore: what to release, renew and admit, and the verdicts.
type FlowRound struct {
	Lease    time.Duration
	Releases []FlowRelease
	Renews   []FlowLease
	Admits   []FlowAdmit
	// Max bounds how many of Admits may be admitted (free handler slots).
	Max int

	// Verdicts has one entry per Admits, filled by the store.
	Verdicts []FlowVerdict
	// Lost lists the indexes of Renews whose lease or claim was gone (it had expired and been
	// taken over).
	Lost []int
	// ReleaseFaults, RenewFaults and AdmitFaults are the permanent failures of a round that
	// was otherwise carried out; each Fault.Index is into Releases, Renews or Admits (one
	// index may appear more than once, a command per key). A faulted admission's verdict is
	// FlowWait, but part of its lease or claim may have been taken: release it.
	ReleaseFaults, RenewFaults, AdmitFaults []Fault
}

// FlowLease is what one admitted delivery holds.
type FlowLease struct {
	Token  string // unique per admission; "" when it holds neither (a throttle alone)
	Conc   string // concurrency key, "" when none
	Dedupe string // dedupe key, "" when none
}

// FlowRelease lets go of a lease. With Window > 0 the dedupe claim is kept, marked done, for
// Window (the outcome was ack or drop); otherwise it is deleted.
type FlowRelease struct {
	FlowLease
	Window time.Duration
}

// FlowAdmit asks to start one delivery.
type FlowAdmit struct {
	Token         string
	Dedupe        string
	Conc          string
	ConcLimit     int
	Throttle      string
	ThrottleLimit int
	Period        time.Duration
}

// FlowVerdictKind is what a store decided for one admission.
type FlowVerdictKind uint8

const (
	// FlowWait: not now (a key is busy, the throttle is spent, or Max was reached). Nothing was
	// taken.
	FlowWait FlowVerdictKind = iota
	// FlowAdmitted: its leases and claim are taken and its throttle start counted.
	FlowAdmitted
	// FlowDuplicate: its dedupe key is marked done; nothing was taken.
	FlowDuplicate
)

// FlowVerdict is one admission's verdict. For FlowWait, RetryIn is when trying again may
// succeed (a throttle slot frees, a lease expires); 0 when unknown.
type FlowVerdict struct {
	Kind    FlowVerdictKind
	RetryIn time.Duration
}
