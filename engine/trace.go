package engine

import "context"

// HeaderTraceparent is the W3C trace context header (SPEC §14): an incoming one is continued,
// and every message flowrun writes carries the one of the span that wrote it.
const HeaderTraceparent = "traceparent"

// Tracer makes a pipeline's spans (SPEC §14). A pipeline without one (the default) traces
// nothing: no span, no header, no allocation on the hot path.
type Tracer interface {
	// Start begins the consumer span of one delivery, continuing the trace of its traceparent
	// header when it has one, and returns the context its handler runs in.
	Start(ctx context.Context, d *Delivery) (context.Context, Span)
}

// Span is one delivery's consumer span and the means to make its children. The engine calls
// its methods from one goroutine at a time: the worker until the decision, then the settler.
type Span interface {
	// Handler begins the handler's child span; the returned function ends it.
	Handler(ctx context.Context) (context.Context, func(err error))
	// Emit begins a producer span for one emitted message, sets the message's traceparent to
	// it, and returns the function that ends it once the write is known.
	Emit(t Target, m *Message) func(err error)
	// Settle begins a settlement span for action, sets the traceparent of the messages it
	// writes (a retry copy, a delayed copy, a dead letter) to it, and returns its end.
	Settle(action Action, writes ...*Message) func(err error)
	// End ends the consumer span with the delivery's final outcome (a metrics label).
	End(outcome string, err error)
}
