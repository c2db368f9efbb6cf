package cli

import (
	"context"
	"fmt"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisrun"
)

// waitPipelines builds a wait step's two pipelines (SPEC §16 "Waiting"): "WF/STEP" reads the
// step's stream and parks each run that enters it (or finishes it with the event kept for it),
// and "WF.STEP" reads the wait's source and matches each event to its run by correlate.
func (w *wiring) waitPipelines(ctx context.Context, wf *config.Workflow, store *redisrun.Store, s *config.Step, consumer string) ([]*engine.Pipeline, error) {
	name := stepPipelineName(wf.Name, s.Name)
	log := w.log.With().Str(engine.FieldPipeline, name).Str(engine.FieldSource, "workflow").Logger()
	// the handler reads neither the input nor the outputs: a park is one script
	src := store.StepSource(s.Name, redisrun.StepOptions{Consumer: consumer, SkipInput: true, SkipSteps: true}, log)
	var tracer engine.Tracer
	if w.tel != nil {
		tracer = w.tel.Pipeline(name, "redis")
	}
	step := assemble(s.Pipeline, name, src, store.WaitHandler(), nil, tracer, log)
	step.DeadLetter = workflowDeadLetter(wf)
	events, err := w.sourcePipeline(ctx, s.Wait.Pipeline, config.WaitPipelineName(wf.Name, s.Name),
		store.EventHandler(s.Name, s.KeepFor(), s.Wait.Correlate.EvalString))
	if err != nil {
		step.Source.Close()
		return nil, fmt.Errorf("workflow %s: step %s: wait: %w", wf.Name, s.Name, err)
	}
	events.DeadLetter = "" // an event that matches no run is rejected, never dead-lettered
	return []*engine.Pipeline{step, events}, nil
}

// countRejected counts a wait's expired kept event on its events pipeline.
func (ws *workflows) countRejected(wf string) func(step string) {
	return func(step string) {
		if eng := ws.eng.Load(); eng != nil {
			eng.Count(config.WaitPipelineName(wf, step), engine.OutcomeRejected)
		}
	}
}
