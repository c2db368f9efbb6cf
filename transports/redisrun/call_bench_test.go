package redisrun

import (
	"testing"
	"time"

	"github.com/flowrun/flowrun/workflow"
)

// BenchmarkCallFinish lays out one step's finish for applyScript, as every step visit's
// settlement does.
func BenchmarkCallFinish(b *testing.B) {
	g := &workflow.Graph{Name: "bench", Retention: time.Hour, Steps: []workflow.StepDef{{Name: "one", Next: "two"}, {Name: "two"}}}
	s := NewStore(nil, g)
	st, _ := g.Start("12345", []byte(`{"id":1}`), time.Now())
	st.Visit = 1
	t := g.Finish(st, nil, 1, "ack", time.Now())
	t.HasOutput, t.Output = true, []byte(`"one"`)
	op := applyOp{t: t, prev: st, ackStream: s.k.step("one"), ackID: "1700000000000-0"}
	b.ReportAllocs()
	for b.Loop() {
		s.call(op)
	}
}
