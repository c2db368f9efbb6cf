package pipe

// The pipe kind, registered with package transports.

import (
	"context"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
)

// pipeAttrs and pipePipelineAttrs are the pipe source block's attributes and the pipeline's
// that only a pipe source takes: what the reference documents and Decode decodes.
var (
	pipeAttrs = []schema.Attr{
		schema.String("key").NonEmpty().DefaultDoc("every key").Describe("Read only the records with this key; others are skipped."),
	}
	pipePipelineAttrs = []transports.PipelineAttr{{AppliesTo: "a pipe source", Attr: schema.String("out_retry").NonEmpty().Require().Describe(
		"The key under which retry copies leave on standard output, for whatever reads flowrun's output to feed back; required for a pipeline with a pipe source.",
	)}}
)

func init() {
	transports.Register(transports.Kind{
		Name:          "pipe",
		Order:         70,
		Attrs:         pipeAttrs,
		PipelineAttrs: pipePipelineAttrs,
		Summary:       "JSON-lines records on standard input, a Unix filter",
		Doc:           pipeDoc,
		Example:       pipeExample,
		New:           func() transports.Config { return &Config{} },
	})
}

// Config is a pipe source block, decoded: the source's Options, OutRetry the pipeline's
// out_retry.
type Config struct {
	Options
}

var (
	_ transports.Config            = (*Config)(nil)
	_ transports.StdinReader       = (*Config)(nil)
	_ transports.Inspector         = (*Config)(nil)
	_ transports.DeadLetterLocator = (*Config)(nil)
)

// Decode reads the source block and the pipeline's out_retry, which a pipe source requires.
func (c *Config) Decode(b *transports.Block) {
	c.Key = b.Values(pipeAttrs).String("key")
	p := b.PipelineValues(pipePipelineAttrs)
	if !p.Written("out_retry") {
		b.Report(transports.MissingArgument(b.Pipeline.DefRange, "out_retry",
			"for a pipeline with a pipe source (the key under which retry copies leave on stdout)"))
	}
	c.OutRetry = p.String("out_retry")
}

// NaturalKey is the key filter ("" for every key).
func (c *Config) NaturalKey() string { return c.Key }

// Capabilities: the input ends; nothing is acknowledged natively.
func (c *Config) Capabilities() engine.Capabilities { return engine.Capabilities{} }

// ReadsStdin: the pipe source reads standard input.
func (c *Config) ReadsStdin() bool { return true }

// Build returns the source, reading env.Stdin and writing copies to env.Stdout.
func (c *Config) Build(_ context.Context, env *transports.Env) (engine.Source, error) {
	return New(c.Options, env.Stdin, env.Stdout, env.Logger), nil
}

// Inspect names standard input; there is nothing in Redis to count.
func (c *Config) Inspect(context.Context, *transports.Env) (transports.Stats, error) {
	return transports.Stats{Key: "stdin"}, nil
}

// DeadLettersAt: dead letters leave as records on standard output.
func (c *Config) DeadLettersAt() string { return "records on standard output, not in Redis" }
