package cli

import (
	"net/http"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/cli/status"
	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports"
)

// statusPage is the page `--http-addr` serves at / (SPEC §15). pipelines is asked at each
// request, so a reload that changes them shows without a restart.
func statusPage(pipelines func() []*config.Pipeline, eng *engine.Engine, samples *sourceGauges, env func(string) *transports.Env, token string, log zerolog.Logger) http.Handler {
	return status.Handler(status.Options{
		Pipelines:   pipelines,
		Engine:      eng.Status,
		Stats:       samples.latest,
		Refresh:     samples.refresh,
		Env:         env,
		Graph:       func() status.Graph { return buildGraph(pipelines()).export() },
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
