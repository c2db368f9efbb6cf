package cli

import (
	"net/http"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/cli/status"
	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/redisrun"
)

// statusPage is the page `--http-addr` serves at / (SPEC §15). pipelines is asked at each
// request, so a reload that changes them shows without a restart.
func statusPage(pipelines func() []*config.Pipeline, wfs *workflows, eng *engine.Engine, samples *sourceGauges, env func(string) *transports.Env, token string, log zerolog.Logger) http.Handler {
	return status.Handler(status.Options{
		Pipelines:   pipelines,
		Engine:      eng.Status,
		Stats:       samples.latest,
		Refresh:     samples.refresh,
		Env:         env,
		Graph:       func() status.Graph { return buildGraph(pipelines()).export() },
		Workflows:   wfs.statusPage,
		AdminToken:  token,
		SampleEvery: sampleEvery,
		Logger:      log,
	})
}

// export is the topology as the status page draws it.
func (g *graph) export() status.Graph {
	out := status.Graph{}
	for _, n := range g.nodes {
		out.Nodes = append(out.Nodes, status.Node{ID: n.id, Label: n.label, Pipeline: n.pipeline})
	}
	for _, e := range g.edges {
		out.Edges = append(out.Edges, status.Edge{From: e.from, To: e.to, Label: e.label})
	}
	return out
}

// statusPage is the workflows running now, with their runs and their pipelines, as the status
// page shows them.
func (ws *workflows) statusPage() []status.Workflow {
	var out []status.Workflow
	for _, r := range ws.list() {
		wf := r.cfg
		w := status.Workflow{Name: wf.Name, Runs: r.store}
		if src := wf.Start.Source; src != nil {
			w.Pipelines = append(w.Pipelines, status.Pipeline{Name: wf.Name, Kind: src.Kind, Key: src.NaturalKey(), Source: src.Config})
		}
		for _, s := range wf.Steps {
			w.Steps = append(w.Steps, s.Name)
			w.Pipelines = append(w.Pipelines, status.Pipeline{Name: stepPipelineName(wf.Name, s.Name), Kind: "workflow",
				Key: redisrun.StepStream(wf.Name, s.Name)})
			if s.Wait != nil && s.Wait.Source != nil {
				src := s.Wait.Source
				w.Pipelines = append(w.Pipelines, status.Pipeline{Name: config.WaitPipelineName(wf.Name, s.Name), Kind: src.Kind,
					Key: src.NaturalKey(), Source: src.Config})
			}
		}
		out = append(out, w)
	}
	return out
}
