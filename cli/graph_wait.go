package cli

import "github.com/flowrun/flowrun/config"

// waitKeys are the keys the workflow's wait steps read their events from.
func waitKeys(w *config.Workflow) []graphKey {
	var out []graphKey
	for _, s := range w.Steps {
		if s.Wait == nil || s.Wait.Pipeline == nil || s.Wait.Source == nil {
			continue
		}
		if k, ok := sourceKey(s.Wait.Pipeline); ok {
			out = append(out, k)
		}
	}
	return out
}

// waitEdges draw each wait step's events: from the key its source reads into the step, labelled
// "events" and the correlate expression.
func (g *graph) waitEdges(w *config.Workflow, sid map[string]string) []graphEdge {
	var out []graphEdge
	for _, s := range w.Steps {
		if s.Wait == nil || s.Wait.Pipeline == nil || s.Wait.Source == nil {
			continue
		}
		k, ok := sourceKey(s.Wait.Pipeline)
		if !ok {
			continue
		}
		label := "events"
		if s.Wait.Correlate != nil {
			label += " by " + s.Wait.Correlate.String()
		}
		out = append(out, graphEdge{from: g.keys[k], to: sid[s.Name], label: label, dashed: true})
	}
	return out
}
