package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Handler decides the fate of one delivery: a rule set or a compiled Go handler.
// ctx is cancelled when a stop's grace period (shutdown_timeout) runs out, not at the signal.
type Handler interface {
	Handle(ctx context.Context, d *Delivery) Result
}

// Inliner is implemented by a handler that never blocks: no I/O, no waiting (a rule set, whose
// emits the settler writes). When every worker is idle the engine may run such a handler on the
// source's goroutine, saving a hand-over between threads per message at low rates.
type Inliner interface {
	Inline() bool
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d *Delivery) Result

func (f HandlerFunc) Handle(ctx context.Context, d *Delivery) Result { return f(ctx, d) }

// Result is a handler's decision plus what it emits. A non-nil Err counts as retry and is logged.
type Result struct {
	Outcome Outcome
	Emits   []Emit
	Err     error
	// Duplicate says the work was done before (a start message of a run that exists, a stale
	// step visit, SPEC §16): the delivery is acknowledged and counted as duplicate.
	Duplicate bool
}

// Target says where an emitted message goes (SPEC §7 emit blocks).
type Target struct {
	Kind  string // "stream", "list", "pubsub" or "record"
	Redis string // the redis block for Redis kinds; resolved at load time
	Path  string // record only: a stream file (absolute); empty means stdout
}

// Emit is one message a handler writes before its delivery is settled.
type Emit struct {
	Target  Target
	Message *Message // Key is the destination key
}

// Sink writes messages to one target.
type Sink interface {
	Publish(ctx context.Context, msgs ...*Message) error
}

// SinkResolver gives the sink for a target; the engine caches what it returns.
type SinkResolver func(t Target) (Sink, error)

// Capabilities is what a transport does natively. The settlement policy reads it; nothing else
// in the engine asks what kind a source is.
type Capabilities struct {
	// Ack: the source has a native acknowledgement (XACK, LREM from a processing list), so a
	// retry copy is always written and acknowledging matters.
	Ack bool
	// RetryInPlace: a retry leaves the entry pending to be taken back later (claiming, reclaim).
	RetryInPlace bool
	// MinIdle is how long a RetryInPlace entry must sit idle before it is taken back.
	MinIdle time.Duration
	// DurableDelay: retry_after is stored durably by the transport (delayed_retry = durable_zset).
	DurableDelay bool
	// DeliveryCount: the transport sets Delivery.Attempt from the server's delivery count.
	DeliveryCount bool
	// Batch is how many deliveries the source reads at once: the engine holds up to that many
	// for its workers (1 when unset).
	Batch int
}

// Number sets d.Attempt (SPEC §5): from x-retry-count, unless the source counts deliveries
// itself (DeliveryCount) and has set it. The engine calls it once per delivery, before the cap.
func (c Capabilities) Number(d *Delivery) {
	if !c.DeliveryCount {
		d.Attempt = d.RetryCount() + 1
	}
}

// Action is what a transport is told to do with a delivery.
type Action uint8

const (
	// ActAck acknowledges the original (XACK, LREM, a checkpoint; nothing for forms without one).
	ActAck Action = iota
	// ActRequeue writes Copy back to the source's key (or retry_to/out_retry), then acknowledges
	// the original; atomically where the transport can.
	ActRequeue
	// ActLeave leaves the original pending to be taken back (claiming retry). Until HoldUntil the
	// transport keeps it from looking idle.
	ActLeave
	// ActDeadLetter writes Copy to DeadLetterKey in the source's own kind, then acknowledges.
	ActDeadLetter
	// ActDelay stores Copy durably until Due, then acknowledges the original (durable_zset).
	ActDelay
)

func (a Action) String() string {
	return [...]string{"ack", "requeue", "leave", "dead_letter", "delay"}[a]
}

// Settlement is one decided delivery for the transport to execute.
type Settlement struct {
	Delivery      *Delivery
	Action        Action
	Copy          *Message  // ActRequeue, ActDeadLetter, ActDelay
	DeadLetterKey string    // ActDeadLetter
	Due           time.Time // ActDelay
	HoldUntil     time.Time // ActLeave: keep from looking idle until then (zero: release now)
}

// Source reads deliveries and executes settlements with its native commands.
type Source interface {
	// Receive reads until ctx ends (returns ctx's error or nil) or, for a finite source, the
	// input is done (returns nil), handing deliveries to feed: it asks feed.Room before a read
	// and reads no more than that, so it never runs ahead of the handlers by more than a batch,
	// and pushes nothing once ctx has ended. Transient read failures are retried inside with
	// backoff.
	Receive(ctx context.Context, feed Feed) error
	// Settle executes a batch of settlements, in order per delivery. It is called from one
	// goroutine per pipeline; it must not use the connection that blocks on reads.
	Settle(ctx context.Context, batch []Settlement) error
	// Requeue writes runtime copies (held retry_after copies that came due) back to the source.
	Requeue(ctx context.Context, msgs []*Message) error
	Capabilities() Capabilities
	// Close releases the source after Receive has returned and the last Settle is done.
	Close() error
}

// ErrUnsupported is returned by transports asked for what they cannot do.
var ErrUnsupported = errors.New("unsupported")

// PartialError is a Settle error after which only some of the batch is left to do: a retry sends
// just those, so a copy that was written is never written twice.
type PartialError interface {
	error
	FailedIndexes() []int // indexes into the batch given to Settle
}

// ErrorHook is embedded by a source that counts its own failures (a malformed record, a failed
// read) into flowrun_source_errors_total; the engine sets the hook before Receive.
type ErrorHook struct{ f atomic.Pointer[func()] }

// SetErrorHook is called by the engine once, before Receive.
func (h *ErrorHook) SetErrorHook(f func()) { h.f.Store(&f) }

// ReportError counts one failure; without a hook it does nothing.
func (h *ErrorHook) ReportError() {
	if f := h.f.Load(); f != nil {
		(*f)()
	}
}

// Releaser is implemented by a source that keeps state per delivery (tracking, keep-alive): the
// engine calls Release for a delivery whose settlement it abandoned after a permanent failure,
// so the source stops tracking it and its own rules bring it back (a pending entry is read
// again, a processing list is swept, a file record stays before the checkpoint).
type Releaser interface {
	Release(s Settlement)
}

// Returner is implemented by a source that can take back deliveries it handed over: at a stop,
// the engine returns those no handler has started instead of running them (a stream leaves
// them pending, a list puts them back). It is called before Close. Without it the engine runs
// them, since a source without acknowledgement would lose them otherwise.
type Returner interface {
	Return(ds []*Delivery)
}
