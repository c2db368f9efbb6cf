package cli

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"time"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// What the reference in docs/ says about the command line and the metrics, read from what the
// commands and the metrics registry actually are, so that `go generate ./docs` cannot drift
// from them.

// CommandDoc is one command as the reference shows it.
type CommandDoc struct {
	Name    string
	Usage   string // "flowrun run [flags] [PATH...]"
	Summary string
	Exits   string
	// Help is what `flowrun help NAME` prints: usage, flags with their defaults, example.
	Help string
}

// Commands lists the commands in the order `flowrun help` does.
func Commands() []CommandDoc {
	out := make([]CommandDoc, 0, len(commands))
	for _, c := range commands {
		var stdout, stderr bytes.Buffer
		Run(context.Background(), []string{"help", c.name}, Stdio{In: strings.NewReader(""), Out: &stdout, Err: &stderr})
		usage := "flowrun " + c.name
		if c.args != "" {
			usage += " " + c.args
		}
		out = append(out, CommandDoc{Name: c.name, Usage: usage, Summary: c.summary, Exits: c.exits, Help: stdout.String()})
	}
	return out
}

// ExitCode is one exit code of flowrun.
type ExitCode struct {
	Code int
	Doc  string
}

// ExitCodes are the exit codes every command draws from (SPEC §1).
var ExitCodes = []ExitCode{
	{ExitOK, "Success: a clean stop of `run` (a stop signal, or the end of a file replay or pipe), a valid configuration, every test passed."},
	{ExitConfig, "The configuration is invalid (nothing was started), a usage error (an unknown command or flag), a failed `fmt -check`, a failed test, or a bad `dlq --where` filter."},
	{ExitRuntime, "A runtime failure: Redis unreachable for `inspect` and `dlq`, a Redis authentication or TLS failure at start, a source that cannot be built."},
}

// MetricDoc is one metric of `/metrics`.
type MetricDoc struct {
	Name   string
	Type   string // counter, gauge, histogram
	Labels []string
	Help   string
}

// Metrics lists the flowrun_* metrics that `run --http-addr` serves, by name: read from a fresh
// registry made as `run` makes it, with one child of every vector so that each is gathered.
func Metrics() []MetricDoc {
	m := newMetrics()
	m.readEngine(onePipeline{})
	p := m.Pipeline("p")
	p.SettleFailure("connection")
	p.(*boundMetrics).RuleError("r")
	m.sources.lag.WithLabelValues("p")
	m.sources.pending.WithLabelValues("p")
	m.sources.deadLetters.WithLabelValues("p")
	m.runDone("w")(workflow.Completed, time.Second)
	m.readRuns(func(context.Context) []activeCount { return []activeCount{{workflow: "w", step: "s"}} })
	m.traces(noSpans{}) // registered by run only when tracing is on
	fams, err := m.reg.Gather()
	if err != nil {
		panic(err) // the registry is made here: a mistake in this package
	}
	var out []MetricDoc
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "flowrun_") {
			continue
		}
		d := MetricDoc{Name: f.GetName(), Type: strings.ToLower(f.GetType().String()), Help: f.GetHelp()}
		if len(f.Metric) > 0 {
			for _, l := range f.Metric[0].Label {
				d.Labels = append(d.Labels, l.GetName())
			}
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// onePipeline is an engine that has run one pipeline, p.
type onePipeline struct{}

func (onePipeline) Totals() []engine.PipelineTotals { return []engine.PipelineTotals{{Name: "p"}} }
func (onePipeline) Status() []engine.PipelineStatus { return []engine.PipelineStatus{{Name: "p"}} }

type noSpans struct{}

func (noSpans) Dropped() int64  { return 0 }
func (noSpans) Exported() int64 { return 0 }
