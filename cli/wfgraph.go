package cli

import (
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
			Timeout: s.Timeout, Delay: s.Delay, ForEach: s.ForEach != nil, Wait: s.Wait != nil, KeepFor: s.KeepFor(),
		})
	}
	return workflow.NewGraph(wf.Name, wf.OnFailure, wf.Retention, steps)
}

// stepPipelineName is the engine pipeline of a workflow's step (SPEC §16): "WF/STEP".
func stepPipelineName(wf, step string) string { return wf + "/" + step }

// runIDFunc evaluates a workflow's run_id over the start delivery; nil without one (the store
// then names the run itself).
func runIDFunc(v *rules.Value) func(d *engine.Delivery) (string, error) {
	if v == nil {
		return nil
	}
	return v.EvalString
}

// payloadFunc evaluates a step's payload expression; nil without one (the handler gets the
// run's input).
func payloadFunc(v *rules.Value) workflow.PayloadFunc {
	if v == nil {
		return nil
	}
	return v.EvalPayload
}

// stepHandler wraps a step's handler for its step pipeline: workflow.NewForEachHandler for a
// fan-out step (SPEC §16), else workflow.NewStepHandler.
func stepHandler(g *workflow.Graph, s *config.Step, inner engine.Handler) engine.Handler {
	if s.ForEach != nil {
		return workflow.NewForEachHandler(g, s.Name, inner, payloadFunc(s.Payload), s.ForEach.Eval, s.MaxItems)
	}
	return workflow.NewStepHandler(g, s.Name, inner, payloadFunc(s.Payload))
}
