package cli

import (
	"context"

	"github.com/flowrun/flowrun/config"
)

// inspectWaits reads the source row of each wait step's events pipeline ("WF.STEP"): its lag and
// pending events. On an error it returns what it has, and the first error.
func inspectWaits(ctx context.Context, conns *adminConns, wf *config.Workflow) ([]inspectRow, error) {
	var rows []inspectRow
	var first error
	for _, s := range wf.Steps {
		if s.Wait == nil || s.Wait.Pipeline == nil || s.Wait.Source == nil {
			continue
		}
		row, err := inspectPipeline(ctx, conns, s.Wait.Pipeline)
		row.Pipeline = config.WaitPipelineName(wf.Name, s.Name)
		rows = append(rows, row)
		if err != nil && first == nil {
			first = err
		}
	}
	return rows, first
}

// waitBlocks are the redis blocks the workflow's wait sources read.
func waitBlocks(wf *config.Workflow) []string {
	var out []string
	for _, s := range wf.Steps {
		if s.Wait != nil && s.Wait.Source != nil {
			out = append(out, s.Wait.Source.Redis)
		}
	}
	return out
}
