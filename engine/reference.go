package engine

// What the reference in docs/ says about outcomes and headers: tables next to the names the
// engine uses, so that `go generate ./docs` writes them and the tests catch a name without a doc.

// KindDoc documents one outcome kind.
type KindDoc struct {
	Kind Kind
	// Expr is how a rule writes it ("" when rules cannot: dead_letter is for Go handlers).
	Expr string
	Doc  string // Markdown
}

// Kinds lists every outcome a handler can return.
var Kinds = []KindDoc{
	{KindAck, "ack", "Done: the delivery is acknowledged."},
	{KindDrop, "drop", "Done, deliberately not handled: acknowledged like `ack`, counted apart."},
	{KindRetry, "retry", "Try again now: a copy with `x-retry-count` one higher, or, on `claiming` and `reclaim`, the entry left pending to be claimed again. A handler that panics or errors, and a rule whose expression fails at run time, count as `retry`."},
	{KindRetryAfter, "retry_after(d)", "Try again after `d`: a delayed copy, held in the process or, with `delayed_retry = \"durable_zset\"`, in Redis."},
	{KindDeadLetter, "", "Give up now: the message goes to the pipeline's `dead_letter` with the handler's reason. Go handlers only (the `http` handler on a 4xx, `exec` on an exit other than 0 and 75)."},
}

// OutcomeLabelDocs says what each value of the metrics' `outcome` label counts.
var OutcomeLabelDocs = map[string]string{
	"ack":           "The handler returned `ack`.",
	"drop":          "The handler returned `drop`.",
	"retry":         "The handler returned `retry` (or failed), and a retry was taken.",
	"retry_after":   "The handler returned `retry_after(d)`.",
	LabelDeadLetter: "The delivery went to the dead letter: the cap was reached, or a Go handler dead-lettered it.",
	LabelRejected:   "The cap was reached and the pipeline has no `dead_letter`: acknowledged and logged, nothing written.",
	LabelDuplicate:  "A `dedupe` key had already succeeded within its window: acknowledged without running the handler.",
}

// HeaderDoc documents one header flowrun sets (SPEC §6).
type HeaderDoc struct {
	Name string
	On   string // which messages carry it
	Doc  string // Markdown
}

// Headers lists every header flowrun sets, in the order of the Header constants.
var Headers = []HeaderDoc{
	{HeaderRetryCount, "retry copies, delayed copies", "Retries before this copy; absent on an original (read as 0). The attempt of a source without a delivery count is `x-retry-count` + 1."},
	{HeaderDeliveryCount, "`claiming` and `reclaim` deliveries", "`claiming`: deliveries before this one (a fresh entry `0`); `reclaim`: including this one (a fresh entry `1`)."},
	{HeaderIdleMS, "`claiming` and `reclaim` deliveries", "`claiming`: how long the entry sat pending, in ms, from `XPENDING` (a fresh entry `0`); `reclaim`: `min_idle` in ms, a lower bound, since `XAUTOCLAIM` resets the idle time before it can be read (a fresh entry `0`)."},
	{HeaderDeadLetterReason, "dead letters", "Why the message was dead-lettered: `attempt N exceeds max_attempts M` (skipped before the handler), `max_attempts M reached` (with the error, when the handler failed), or a Go handler's reason (`http 400 Bad Request: …`, `exec: exit status 2: <last line of stderr>`)."},
	{HeaderOriginalKey, "dead letters", "The key the message was read from."},
	{HeaderOriginalID, "dead letters", "The id of the delivery that was dead-lettered (for a copy, the copy's id); absent where messages have no id."},
	{HeaderAttempts, "dead letters", "That delivery's attempt number; it exceeds the cap when the handler was skipped."},
	{HeaderFailedAt, "dead letters", "When it was dead-lettered, RFC 3339."},
	{HeaderIdempotencyKey, "workflow step visits", "`<workflow>/<run>/<step>/<visit>` (a `for_each` element's adds `/<index>`): the same across the retries of one visit, so a handler that runs twice can tell; `http` sends it as `Idempotency-Key`."},
	{HeaderRunID, "workflow dead letters, step visits", "The id of the run the message belongs to."},
	{HeaderScheduledAt, "`schedule` messages", "The tick the message is for, RFC 3339 in UTC (the payload's `scheduled_at`); a retry copy keeps it."},
}
