package plugins_test

import (
	"context"
	"fmt"

	"github.com/flowrun/flowrun/plugins"
)

// A handler in a workflow step reads its run and records the step's output; the same handler
// in a pipeline sees no run, and its Output does nothing.
func ExampleEmitter_Output() {
	reserve := plugins.HandlerFunc(func(_ context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
		if run, ok := m.Run(); ok {
			sku := run.Input.(map[string]any)["sku"]
			emit.Output(map[string]any{"hold": fmt.Sprintf("%s/%v", m.Header("x-idempotency-key"), sku)})
		}
		return plugins.Ack(), nil
	})
	step := plugins.TestMessage{Run: &plugins.RunInfo{ID: "o-7", Workflow: "order", Step: "reserve", Visit: 1,
		Input: map[string]any{"sku": "A-1"}}}
	res := plugins.Call(context.Background(), reserve, step)
	fmt.Println(res.Outcome, string(res.Output))
	res = plugins.Call(context.Background(), reserve, plugins.TestMessage{})
	fmt.Println(res.Outcome, res.Output == nil)
	// Output:
	// ack {"hold":"order/o-7/reserve/1/A-1"}
	// ack true
}
