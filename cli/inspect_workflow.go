package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports/redisrun"
	"github.com/flowrun/flowrun/workflow"
)

// workflowRow is one workflow's entry of `flowrun inspect` (SPEC §16): its runs per status and
// its active runs per step. In --json it stands after the pipelines' rows, told from them by
// its "workflow" key.
type workflowRow struct {
	Workflow string           `json:"workflow"`
	Runs     map[string]int64 `json:"runs"`   // by status, every status listed
	Active   map[string]int64 `json:"active"` // by step, every step listed
	steps    []string         // in declaration order, for the table
}

// inspectWorkflow reads a workflow's counts and its start pipeline's source row (named as the
// engine names the start pipeline: the workflow's name). On an error it returns what it has.
func inspectWorkflow(ctx context.Context, conns *adminConns, wf *config.Workflow) (workflowRow, inspectRow, error) {
	row := workflowRow{Workflow: wf.Name, Runs: map[string]int64{}, Active: map[string]int64{}}
	for _, st := range workflow.Statuses {
		row.Runs[string(st)] = 0
	}
	for _, s := range wf.Steps {
		row.Active[s.Name] = 0
		row.steps = append(row.steps, s.Name)
	}
	start, err := inspectPipeline(ctx, conns, wf.Start)
	start.Pipeline = wf.Name
	if err != nil {
		return row, start, err
	}
	g, err := graphOf(wf)
	if err != nil {
		return row, start, err
	}
	c, err := conns.get(ctx, wf.Redis)
	if err != nil {
		return row, start, err
	}
	active, byStatus, err := redisrun.NewStore(c, g).Counts(ctx)
	if err != nil {
		return row, start, conns.redact(wf.Redis, err)
	}
	for st, n := range byStatus {
		row.Runs[string(st)] = n
	}
	for step, n := range active {
		if _, ok := row.Active[step]; ok || n != 0 {
			row.Active[step] = n // a step a reload removed shows while runs are still there
		}
	}
	return row, start, nil
}

// writeWorkflowTables prints, after the pipelines' table, the workflows' runs per status and
// their active runs per step.
func writeWorkflowTables(w io.Writer, rows []workflowRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"WORKFLOW"}
	for _, st := range workflow.Statuses {
		head = append(head, strings.ToUpper(string(st)))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		line := []string{cell(r.Workflow)}
		for _, st := range workflow.Statuses {
			line = append(line, fmt.Sprint(r.Runs[string(st)]))
		}
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW\tSTEP\tACTIVE")
	for _, r := range rows {
		for _, s := range r.steps {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", cell(r.Workflow), cell(s), r.Active[s])
		}
	}
	tw.Flush()
}
