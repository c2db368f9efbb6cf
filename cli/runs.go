package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/internal/hclutil"
	"github.com/flowrun/flowrun/transports/redisrun"
	"github.com/flowrun/flowrun/workflow"
)

// defaultRunsLimit is how many runs `runs list` shows without --limit.
const defaultRunsLimit = 20

// runsSubcommands are `flowrun runs`'s, in the order help lists them.
var runsSubcommands = []string{"list", "show", "start", "cancel", "retry"}

const runsUsage = `usage: flowrun runs list|show|start|cancel|retry WORKFLOW [RUN] [flags] [PATH...]
  list    the workflow's runs, newest first (--status S; --limit N, default 20, 0: all; --json)
  show    one run: its input, outputs, status, current step and history (--json)
  start   start a run with --input JSON and print its id
  cancel  cancel an active run (its compensations run first under on_failure = "compensate")
  retry   resume a failed run at the step that failed, with fresh attempts
`

// runsArgs is a parsed `flowrun runs` command line.
type runsArgs struct {
	sub      string
	workflow string
	run      string // show, cancel, retry
	paths    []string
	status   string // list --status
	limit    int    // list --limit
	input    string // start --input
	inputSet bool
	asJSON   bool // list, show --json
}

// cmdRuns is `flowrun runs list|show|start|cancel|retry WORKFLOW [RUN] [flags] [PATH...]`
// (SPEC §16 "Commands"): exit codes as dlq's, and 1 for an unknown run, an --input that is not
// JSON, and a retry of a run that is not failed or was compensated.
func cmdRuns(ctx context.Context, args []string, stdio Stdio) int {
	a, code := parseRunsArgs(args, stdio)
	if a == nil {
		return code
	}
	cfg := load(a.paths, config.Options{}, stdio)
	if cfg == nil {
		return ExitConfig
	}
	wf := cfg.Workflow(a.workflow)
	if wf == nil {
		msg := fmt.Sprintf("flowrun runs %s: no workflow %q in the files loaded", a.sub, a.workflow)
		if c := closest(a.workflow, workflowNames(cfg)); c != "" {
			msg += fmt.Sprintf("; did you mean %q?", c)
		}
		fmt.Fprintln(stdio.Err, msg)
		return ExitConfig
	}
	g, err := graphOf(wf)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun runs %s: %v\n", a.sub, err)
		return ExitConfig
	}
	conns := newAdminConns(cfg)
	defer conns.close()
	c, err := conns.get(ctx, wf.Redis)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun runs %s: %v\n", a.sub, err)
		return ExitRuntime
	}
	store := redisrun.NewStore(c, g)
	store.DeadLetter = wf.DeadLetter
	if flush := traceRuns(ctx, a.sub, cfg, store); flush != nil {
		defer flush()
	}
	code, err = a.exec(ctx, wf, store, stdio)
	if err != nil {
		fmt.Fprintf(stdio.Err, "flowrun runs %s: workflow %q: %v\n", a.sub, a.workflow, conns.redact(wf.Redis, err))
		return ExitRuntime
	}
	return code
}

// parseRunsArgs parses the command line, or says what is wrong with it and returns nil and the
// exit code. Everything it checks needs neither the files nor Redis.
func parseRunsArgs(args []string, stdio Stdio) (*runsArgs, int) {
	if len(args) == 0 || !slices.Contains(runsSubcommands, args[0]) {
		if len(args) > 0 && isHelpFlag(args[0]) {
			writeRunsHelp(stdio)
			return nil, ExitOK
		}
		if len(args) > 0 {
			msg := fmt.Sprintf("flowrun runs: unknown subcommand %q", args[0])
			if c := closest(args[0], runsSubcommands); c != "" {
				msg += fmt.Sprintf("; did you mean %q?", c)
			}
			fmt.Fprintln(stdio.Err, msg)
		}
		fmt.Fprint(stdio.Err, runsUsage)
		return nil, ExitConfig
	}
	a := &runsArgs{sub: args[0]}
	fs := newFlagSet("runs "+a.sub, stdio)
	switch a.sub {
	case "list":
		fs.StringVar(&a.status, "status", "", "only the runs of this status")
		fs.IntVar(&a.limit, "limit", defaultRunsLimit, "at most N runs, newest first (0: all)")
		fs.BoolVar(&a.asJSON, "json", false, "print a JSON array")
	case "show":
		fs.BoolVar(&a.asJSON, "json", false, "print one JSON object")
	case "start":
		fs.StringVar(&a.input, "input", "", "the run's input, a JSON value")
	}
	pos, err := positionals(fs, args[1:])
	if err != nil {
		return nil, flagExit(err)
	}
	fs.Visit(func(f *flag.Flag) { a.inputSet = a.inputSet || f.Name == "input" })
	needRun := a.sub == "show" || a.sub == "cancel" || a.sub == "retry"
	switch {
	case len(pos) == 0:
		fmt.Fprintf(stdio.Err, "flowrun runs %s: missing WORKFLOW\n%s", a.sub, runsUsage)
		return nil, ExitConfig
	case needRun && len(pos) == 1:
		fmt.Fprintf(stdio.Err, "flowrun runs %s: missing RUN\n%s", a.sub, runsUsage)
		return nil, ExitConfig
	}
	a.workflow, pos = pos[0], pos[1:]
	if needRun {
		a.run, pos = pos[0], pos[1:]
	}
	a.paths = pos
	if len(a.paths) == 0 {
		a.paths = []string{"."}
	}
	if code := a.check(stdio); code != ExitOK {
		return nil, code
	}
	return a, ExitOK
}

// check refuses what needs no connection to refuse; ExitOK means go on.
func (a *runsArgs) check(stdio Stdio) int {
	switch {
	case a.sub == "list" && a.limit < 0:
		fmt.Fprintf(stdio.Err, "flowrun runs list: --limit must be 0 or more\n")
	case a.sub == "list" && a.status != "" && !slices.Contains(workflow.Statuses, workflow.Status(a.status)):
		fmt.Fprintf(stdio.Err, "flowrun runs list: --status %q: want %s\n", a.status, hclutil.List(statusNames(), "or"))
	case a.sub == "start" && !a.inputSet:
		fmt.Fprintf(stdio.Err, "flowrun runs start: missing --input JSON (the run's input)\n")
	case a.sub == "start" && !json.Valid([]byte(a.input)):
		fmt.Fprintf(stdio.Err, "flowrun runs start: --input is not JSON: %s\n", jsonProblem(a.input))
	default:
		return ExitOK
	}
	return ExitConfig
}

// jsonProblem says what is wrong with a text that is not JSON.
func jsonProblem(s string) string {
	var v any
	err := json.Unmarshal([]byte(s), &v)
	if err == nil {
		return "trailing data"
	}
	return err.Error()
}

// exec runs the subcommand; a code other than ExitOK with a nil error is an answer (an unknown
// run, a run that cannot be retried), not a failure.
func (a *runsArgs) exec(ctx context.Context, wf *config.Workflow, store *redisrun.Store, stdio Stdio) (int, error) {
	switch a.sub {
	case "list":
		runs, err := store.List(ctx, workflow.Status(a.status), a.limit)
		if err != nil {
			return ExitRuntime, err
		}
		if a.asJSON {
			return ExitOK, writeJSON(stdio.Out, runsListJSON(runs))
		}
		writeRunsTable(stdio.Out, runs, a)
		return ExitOK, nil
	case "start":
		id, err := store.Begin(ctx, []byte(a.input), wf.Fingerprint())
		if err != nil {
			return ExitRuntime, err
		}
		fmt.Fprintln(stdio.Out, id)
		return ExitOK, nil
	}
	st, err := store.Get(ctx, a.run)
	if errors.Is(err, workflow.ErrNoRun) {
		fmt.Fprintf(stdio.Err, "flowrun runs %s: workflow %q has no run %q\n", a.sub, a.workflow, a.run)
		return ExitConfig, nil
	}
	if err != nil {
		return ExitRuntime, err
	}
	switch a.sub {
	case "show":
		if a.asJSON {
			return ExitOK, writeJSON(stdio.Out, runJSON(st))
		}
		writeRunBlock(stdio.Out, st)
		return ExitOK, nil
	case "cancel":
		return a.cancel(ctx, store, st, stdio)
	case "retry":
		return a.retry(ctx, store, st, stdio)
	}
	return ExitOK, nil
}

func (a *runsArgs) cancel(ctx context.Context, store *redisrun.Store, st *workflow.State, stdio Stdio) (int, error) {
	if !st.Status.Active() {
		fmt.Fprintf(stdio.Err, "flowrun runs cancel: run %q is %s already, not active\n", st.ID, st.Status)
		return ExitConfig, nil
	}
	err := store.Cancel(ctx, st.ID)
	if errors.Is(err, workflow.ErrNoRun) || errors.Is(err, redisrun.ErrNotActive) { // it ended between the read and the cancel
		fmt.Fprintf(stdio.Err, "flowrun runs cancel: run %q is no longer active\n", st.ID)
		return ExitConfig, nil
	}
	if err != nil {
		return ExitRuntime, err
	}
	fmt.Fprintf(stdio.Out, "cancelled run %s\n", st.ID)
	return ExitOK, nil
}

func (a *runsArgs) retry(ctx context.Context, store *redisrun.Store, st *workflow.State, stdio Stdio) (int, error) {
	if code := retryable(st, stdio.Err, "flowrun runs retry"); code != ExitOK {
		return code, nil
	}
	err := store.Retry(ctx, st.ID)
	if errors.Is(err, workflow.ErrNotRetryable) || errors.Is(err, workflow.ErrNoRun) { // it moved between the read and the retry
		fmt.Fprintf(stdio.Err, "flowrun runs retry: run %q: %v\n", st.ID, err)
		return ExitConfig, nil
	}
	if err != nil {
		return ExitRuntime, err
	}
	fmt.Fprintf(stdio.Out, "retrying run %s at step %s\n", st.ID, st.FailedStep)
	return ExitOK, nil
}

// retryable says on w why st cannot be retried (SPEC §16: only a failed run that was not
// compensated resumes) and returns ExitConfig, or ExitOK when it can.
func retryable(st *workflow.State, w io.Writer, prefix string) int {
	err := st.Retryable()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(w, "%s: %v\n", prefix, err)
	return ExitConfig
}

func workflowNames(cfg *config.Config) []string {
	names := make([]string, len(cfg.Workflows))
	for i, w := range cfg.Workflows {
		names[i] = w.Name
	}
	return names
}

// rfc3339Milli is how runs prints times: RFC 3339 in UTC, to the millisecond Redis keeps.
const rfc3339Milli = "2006-01-02T15:04:05.000Z07:00"

// timeJSON is t as runs prints it; nil (null) for the zero time.
func timeJSON(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return ptrTo(t.UTC().Format(rfc3339Milli))
}

// strJSON is s, or nil (null) when empty.
func strJSON(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// valueJSON is a stored value as JSON: itself when it is JSON, else a JSON string of its text.
func valueJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

// runListItem is one run as `runs list --json` prints it.
type runListItem struct {
	ID        string  `json:"id"`
	Status    string  `json:"status"`
	Step      *string `json:"step"`
	StartedAt *string `json:"started_at"`
	UpdatedAt *string `json:"updated_at"`
}

// runShow is a run as `runs show --json` prints it (SPEC §16).
type runShow struct {
	ID        string                     `json:"id"`
	Workflow  string                     `json:"workflow"`
	Status    string                     `json:"status"`
	Step      *string                    `json:"step"`
	Input     json.RawMessage            `json:"input"`
	Steps     map[string]json.RawMessage `json:"steps"`
	Error     *string                    `json:"error"`
	StartedAt *string                    `json:"started_at"`
	UpdatedAt *string                    `json:"updated_at"`
	History   []runEvent                 `json:"history"`
}

// runEvent is one entry of a run's history as `runs show --json` prints it.
type runEvent struct {
	Step    *string `json:"step"`
	Visit   int     `json:"visit"`
	Attempt int     `json:"attempt"`
	Outcome string  `json:"outcome"`
	At      *string `json:"at"`
	Error   *string `json:"error"`
}

func runsListJSON(runs []*workflow.State) []runListItem {
	out := make([]runListItem, 0, len(runs))
	for _, st := range runs {
		out = append(out, runListItem{ID: st.ID, Status: string(st.Status), Step: strJSON(st.Step),
			StartedAt: timeJSON(st.StartedAt), UpdatedAt: timeJSON(st.UpdatedAt)})
	}
	return out
}

func runJSON(st *workflow.State) runShow {
	r := runShow{ID: st.ID, Workflow: st.Workflow, Status: string(st.Status), Step: strJSON(st.Step),
		Input: valueJSON(st.Input), Steps: map[string]json.RawMessage{}, Error: strJSON(st.Error),
		StartedAt: timeJSON(st.StartedAt), UpdatedAt: timeJSON(st.UpdatedAt), History: []runEvent{}}
	for name, out := range st.Steps {
		r.Steps[name] = valueJSON(out)
	}
	for _, e := range st.History {
		r.History = append(r.History, runEvent{Step: strJSON(e.Step), Visit: e.Visit, Attempt: e.Attempt,
			Outcome: e.Outcome, At: timeJSON(e.At), Error: strJSON(e.Error)})
	}
	return r
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// humanTime is t for a table: RFC 3339 to the second, "-" for none.
func humanTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func writeRunsTable(w io.Writer, runs []*workflow.State, a *runsArgs) {
	if len(runs) == 0 {
		of := ""
		if a.status != "" {
			of = " " + a.status
		}
		fmt.Fprintf(w, "no%s runs of workflow %s\n", of, a.workflow)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tSTEP\tSTARTED-AT\tUPDATED-AT")
	for _, st := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", cell(st.ID), st.Status, cell(st.Step), humanTime(st.StartedAt), humanTime(st.UpdatedAt))
	}
	tw.Flush()
	if a.limit > 0 && len(runs) == a.limit {
		fmt.Fprintf(w, "the newest %d runs shown; --limit 0 shows all\n", len(runs))
	}
}

// writeRunBlock prints one run for a person: its fields, its outputs, its history as a table.
func writeRunBlock(w io.Writer, st *workflow.State) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run:\t%s\n", cell(st.ID))
	fmt.Fprintf(tw, "workflow:\t%s\n", st.Workflow)
	fmt.Fprintf(tw, "status:\t%s\n", st.Status)
	fmt.Fprintf(tw, "step:\t%s\n", cell(st.Step))
	fmt.Fprintf(tw, "started at:\t%s\n", humanTime(st.StartedAt))
	fmt.Fprintf(tw, "updated at:\t%s\n", humanTime(st.UpdatedAt))
	if st.Error != "" {
		fmt.Fprintf(tw, "error:\t%s\n", clip(st.Error, 0))
	}
	fmt.Fprintf(tw, "input:\t%s\n", clip(string(st.Input), payloadWidth))
	tw.Flush()
	if len(st.Steps) > 0 {
		fmt.Fprintln(w, "\noutputs:")
		names := make([]string, 0, len(st.Steps))
		for n := range st.Steps {
			names = append(names, n)
		}
		sort.Strings(names)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, n := range names {
			fmt.Fprintf(tw, "  %s\t%s\n", cell(n), clip(string(st.Steps[n]), payloadWidth))
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nhistory:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  AT\tSTEP\tVISIT\tATTEMPT\tOUTCOME\tERROR")
	for _, e := range st.History {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\n", e.At.UTC().Format(rfc3339Milli), cell(e.Step), e.Visit, e.Attempt,
			cell(e.Outcome), clip(e.Error, reasonWidth))
	}
	tw.Flush()
}

// writeRunsHelp prints runs's help: the flags of its subcommands together.
func writeRunsHelp(stdio Stdio) {
	fs := newFlagSet("runs", stdio)
	fs.String("status", "", "list: only the runs of this status ("+strings.Join(statusNames(), ", ")+")")
	fs.Int("limit", defaultRunsLimit, "list: at most N runs, newest first (0: all)")
	fs.Bool("json", false, "list, show: print JSON (list an array, show one object)")
	fs.String("input", "", "start: the run's input, a JSON value")
	writeCommandHelp(stdio.Out, "runs", fs)
	io.WriteString(stdio.Out, "\nSubcommands:\n"+strings.SplitN(runsUsage, "\n", 2)[1])
}

func statusNames() []string {
	names := make([]string, len(workflow.Statuses))
	for i, s := range workflow.Statuses {
		names[i] = string(s)
	}
	return names
}
