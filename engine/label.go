package engine

import "fmt"

// Label is a decision's outcome as counted in metrics, progress lines and logs: a small integer,
// so counting one is an index and testing one a comparison of integers; String gives the name
// SPEC §10 spells (OutcomeLabels).
type Label uint8

// The outcome labels, in OutcomeLabels' order.
const (
	OutcomeAck Label = iota
	OutcomeDrop
	OutcomeRetry
	OutcomeRetryAfter
	OutcomeDeadLetter
	OutcomeRejected
	OutcomeDuplicate
	numOutcomes
)

// Names of the labels that are not plain outcome kinds, as metrics and logs spell them.
const (
	LabelDeadLetter = "dead_letter"
	LabelRejected   = "rejected"
	// LabelDuplicate is the outcome of a delivery whose dedupe key already succeeded (SPEC §13).
	LabelDuplicate = "duplicate"
)

// OutcomeLabels are the names of the outcome labels, indexed by Label.
var OutcomeLabels = []string{"ack", "drop", "retry", "retry_after", LabelDeadLetter, LabelRejected, LabelDuplicate}

func (l Label) String() string {
	if int(l) < len(OutcomeLabels) {
		return OutcomeLabels[l]
	}
	return fmt.Sprintf("label(%d)", uint8(l))
}

// kindLabel is the label of a decision that settles as its outcome kind says.
func kindLabel(k Kind) Label {
	switch k {
	case KindAck:
		return OutcomeAck
	case KindDrop:
		return OutcomeDrop
	case KindRetry:
		return OutcomeRetry
	case KindRetryAfter:
		return OutcomeRetryAfter
	}
	return OutcomeDeadLetter
}

// acked reports whether l is a success (ack or drop): a dedupe key is marked done only then.
func (l Label) acked() bool { return l == OutcomeAck || l == OutcomeDrop }
