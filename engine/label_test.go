package engine

import "testing"

// Every Label names itself as OutcomeLabels does, each kind settles under its own name, and only
// ack and drop count as a success for dedupe.
func TestLabelNames(t *testing.T) {
	if int(numOutcomes) != len(OutcomeLabels) {
		t.Fatalf("%d labels, OutcomeLabels names %d", numOutcomes, len(OutcomeLabels))
	}
	for l := Label(0); l < numOutcomes; l++ {
		if l.String() != OutcomeLabels[l] {
			t.Errorf("Label(%d) = %q, want %q", l, l, OutcomeLabels[l])
		}
	}
	for k := KindAck; k < KindDeadLetter; k++ {
		if got := kindLabel(k).String(); got != k.String() {
			t.Errorf("kindLabel(%s) = %q", k, got)
		}
	}
	if OutcomeDuplicate.String() != LabelDuplicate || OutcomeDeadLetter.String() != LabelDeadLetter || OutcomeRejected.String() != LabelRejected {
		t.Error("the named labels disagree with their constants")
	}
	for l := Label(0); l < numOutcomes; l++ {
		if want := l == OutcomeAck || l == OutcomeDrop; l.acked() != want {
			t.Errorf("%s.acked() = %v", l, l.acked())
		}
	}
	if s := numOutcomes.String(); s != "label(7)" {
		t.Errorf("out of range: %q", s)
	}
}
