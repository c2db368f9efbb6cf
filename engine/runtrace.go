package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// RunTracer traces workflow runs (SPEC §14, §16): a run is one trace, with a span for the run
// from its start to its end and the spans of its step visits as children. The run span is never
// open in a process: its ids are picked when the run is created and kept in the run record (its
// trace context, see RunTraceparent), and whichever process ends the run exports the span with
// them, the run's start time and its end.
type RunTracer interface {
	// RunTrace is the trace context run of workflow, created in ctx, keeps: in a start
	// delivery's handler the ids the start pipeline's tracer picked for it (the start
	// delivery's span is its child), else a new root's. "" when the run is not traced.
	RunTrace(ctx context.Context, workflow, run string) string
	// EndRun exports the span of a run that ended, with the ids of trace (what RunTrace gave).
	EndRun(trace string, e RunEnd)
}

// RunEnd is what a run span says of the run.
type RunEnd struct {
	Workflow, Run string
	Visit         int    // the visit whose settlement ended the run
	Status        string // the final status: completed, failed, compensation_failed, cancelled
	Error         string
	Started, At   time.Time
}

// RunTraceparent is the W3C traceparent of a run's trace context: the run span's, which every
// step message of the run carries. A run's trace context is "TRACEPARENT PARENT" (PARENT: the
// run span's parent span id, "-" for a root), and after a retry "TRACEPARENT PARENT START-MS"
// (RunRetrace).
func RunTraceparent(trace string) string {
	tp, _, _ := strings.Cut(trace, " ")
	return tp
}

// RunRetrace is the trace context of a run resumed at at (runs retry) whose trace context was
// trace: a new run span, the child of the one that ended when the run failed (already exported
// under its own id), begun at the retry ("TRACEPARENT PARENT START-MS"). "" when trace names
// no run span.
func RunRetrace(trace string, at time.Time) string {
	tp, _, ok := strings.Cut(trace, " ")
	// version "-" trace-id(32) "-" span-id(16) "-" flags
	if !ok || len(tp) != 55 || tp[35] != '-' || tp[52] != '-' {
		return ""
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return tp[:36] + hex.EncodeToString(id[:]) + tp[52:] + " " + tp[36:52] + " " + strconv.FormatInt(at.UnixMilli(), 10)
}
