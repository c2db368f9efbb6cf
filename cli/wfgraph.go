package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/rules"
	"github.com/flowrun/flowrun/workflow"
)

// graphOf is the runtime's view of a loaded workflow: its steps and how they join. A load
// without errors has checked what NewGraph checks, so an error here is a mistake of the loader.
func graphOf(wf *config.Workflow) (*workflow.Graph, error) {
	steps := make([]workflow.StepDef, 0, len(wf.Steps))
	for _, s := range wf.Steps {
		steps = append(steps, workflow.StepDef{
			Name: s.Name, Next: s.Next, Compensate: s.Compensate, OnTimeout: s.OnTimeout,
			Timeout: s.Timeout, Delay: s.Delay,
		})
	}
	return workflow.NewGraph(wf.Name, wf.OnFailure, wf.Retention, steps)
}

// stepPipelineName is the engine pipeline of a workflow's step (SPEC §16): "WF/STEP".
func stepPipelineName(wf, step string) string { return wf + "/" + step }

// runIDFunc evaluates a workflow's run_id over the start delivery; nil without one (the store
// then names the run itself). A number is written in decimal, without an exponent.
func runIDFunc(v *rules.Value) func(d *engine.Delivery) (string, error) {
	if v == nil {
		return nil
	}
	return func(d *engine.Delivery) (string, error) {
		x, err := v.Eval(d)
		if err != nil {
			return "", fmt.Errorf("run_id: %w", err)
		}
		var id string
		switch x := x.(type) {
		case string:
			id = x
		case int:
			id = strconv.Itoa(x)
		case int64:
			id = strconv.FormatInt(x, 10)
		case float64:
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return "", fmt.Errorf("run_id: %v is not an id", x)
			}
			id = strconv.FormatFloat(x, 'f', -1, 64)
		case nil:
			return "", fmt.Errorf("run_id %q is null for this message", v.String())
		default:
			return "", fmt.Errorf("run_id %q is a %T, not a string or a number", v.String(), x)
		}
		if id == "" {
			return "", fmt.Errorf("run_id %q is empty for this message", v.String())
		}
		return id, nil
	}
}

// payloadFunc evaluates a step's payload expression: a string as its bytes, any other value as
// its JSON text (as an emit's payload). nil without one (the handler gets the run's input).
func payloadFunc(v *rules.Value) workflow.PayloadFunc {
	if v == nil {
		return nil
	}
	return func(d *engine.Delivery) ([]byte, error) {
		x, err := v.Eval(d)
		if err != nil {
			return nil, fmt.Errorf("payload: %w", err)
		}
		if s, ok := x.(string); ok {
			return []byte(s), nil
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(x); err != nil {
			return nil, fmt.Errorf("payload: %w", err)
		}
		return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
	}
}
