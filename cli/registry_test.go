package cli_test

// A transport added from outside flowrun, in this file alone: a "sequence" source kind that
// counts, with a pipeline attribute of its own, and a "memory" emit kind. config decodes its
// block with its schema and positions, and the command line validates, runs, inspects and
// refuses dlq for it through the registry, as it does for the built-in transports.

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/flowrun/flowrun/cli"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
)

func init() {
	transports.Register(transports.Kind{
		Name: "sequence",
		Schema: hcl.BodySchema{
			Attributes: []hcl.AttributeSchema{{Name: "key", Required: true}, {Name: "count"}},
			Blocks:     []hcl.BlockHeaderSchema{{Type: "header", LabelNames: []string{"name"}}},
		},
		PipelineAttrs: []transports.PipelineAttr{{AppliesTo: "a sequence source", Attr: schema.Attr{Name: "sequence_step"}}},
		New:           func() transports.Config { return &sequenceConfig{} },
	})
	transports.RegisterEmit(transports.EmitKind{
		Name:   "memory",
		GoesTo: "this test's memory",
		Sink: func(engine.Target, *transports.Env) (engine.Sink, error) {
			return memory, nil
		},
	})
}

// sequenceConfig is `source "sequence" { key = "…", count = N, header "NAME" { value = "…" } }`
// with the pipeline's sequence_step: messages whose payloads are step, 2·step, … count·step.
type sequenceConfig struct {
	Key         string
	Count, Step int
	Headers     map[string]string
}

var (
	_ transports.Config    = (*sequenceConfig)(nil)
	_ transports.Inspector = (*sequenceConfig)(nil)
)

func (c *sequenceConfig) Decode(b *transports.Block) {
	b.Attrs().NonEmpty("key", &c.Key)
	c.Count = 1
	b.Attrs().Count("count", &c.Count)
	c.Step = 1
	b.PipelineAttrs().Count("sequence_step", &c.Step)
	b.RejectDeadLetterKey(c.Key)
	c.Headers = map[string]string{}
	for _, h := range b.Body.Blocks {
		attrs, diags := h.Body.JustAttributes()
		b.Report(diags...)
		for _, a := range attrs {
			v, diags := a.Expr.Value(b.EvalContext)
			b.Report(diags...)
			if !diags.HasErrors() && v.Type() == cty.String {
				c.Headers[h.Labels[0]] = v.AsString()
			}
		}
	}
}

func (c *sequenceConfig) NaturalKey() string                { return c.Key }
func (c *sequenceConfig) Capabilities() engine.Capabilities { return engine.Capabilities{} }

func (c *sequenceConfig) Build(context.Context, *transports.Env) (engine.Source, error) {
	return &sequence{c: *c}, nil
}

func (c *sequenceConfig) Inspect(context.Context, *transports.Env) (transports.Stats, error) {
	n := int64(c.Count)
	return transports.Stats{Key: c.Key, Length: &n}, nil
}

// sequence is the source: finite, with nothing to acknowledge.
type sequence struct{ c sequenceConfig }

func (s *sequence) Receive(ctx context.Context, feed engine.Feed) error {
	for i := 1; i <= s.c.Count; i++ {
		d := &engine.Delivery{Message: engine.Message{
			Key: s.c.Key, Headers: maps.Clone(s.c.Headers), Payload: []byte(strconv.Itoa(i * s.c.Step)),
		}}
		if !feed.Push(ctx, []*engine.Delivery{d}) {
			return ctx.Err()
		}
	}
	return nil
}

func (s *sequence) Settle(context.Context, []engine.Settlement) error { return nil }
func (s *sequence) Requeue(context.Context, []*engine.Message) error  { return engine.ErrUnsupported }
func (s *sequence) Capabilities() engine.Capabilities                 { return s.c.Capabilities() }
func (s *sequence) Close() error                                      { return nil }

// memorySink keeps what `emit "memory"` blocks emit.
type memorySink struct {
	mu   sync.Mutex
	msgs []*engine.Message
}

var memory = &memorySink{}

func (m *memorySink) Publish(_ context.Context, msgs ...*engine.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, msgs...)
	return nil
}

func (m *memorySink) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = nil
}

func (m *memorySink) payloads() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, msg := range m.msgs {
		out = append(out, msg.Key+"="+string(msg.Payload))
	}
	return out
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Run(t.Context(), args, cli.Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func writeHCL(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flow.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOutsideKindRuns(t *testing.T) {
	path := writeHCL(t, `
pipeline "count" {
  source "sequence" {
    key   = "numbers"
    count = 3
    header "from" {
      value = "sequence"
    }
  }
  sequence_step = 2
  concurrency   = 1
  rule "all" {
    emit "memory" {
      key = "seen"
    }
    emit "record" {
      key     = "out"
      headers = { from = "headers['from']" }
    }
    outcome = "ack"
  }
}

test "the key defaults to the source's" {
  pipeline = "count"
  message {
    payload = "2"
  }
  expect {
    outcome = "ack"
    emits   = [{ kind = "memory", key = "seen" }, { kind = "record", key = "out" }]
  }
}
`)
	if code, out, errs := runCLI(t, "validate", path); code != cli.ExitOK || out != "ok: 1 pipelines\n" {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := runCLI(t, "test", path); code != cli.ExitOK {
		t.Fatalf("test: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	memory.reset()
	code, out, errs := runCLI(t, "run", "--log-level", "error", path)
	if code != cli.ExitOK {
		t.Fatalf("run: exit %d, stderr %q", code, errs)
	}
	if got := strings.Count(out, `{"key":"out","headers":{"from":"sequence"}`); got != 3 {
		t.Errorf("run: %d records on stdout, want 3:\n%s", got, out)
	}
	if got := strings.Join(memory.payloads(), " "); got != "seen=2 seen=4 seen=6" {
		t.Errorf("memory emits: %s", got)
	}

	code, out, errs = runCLI(t, "inspect", "--json", path)
	var rows []map[string]any
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 {
		t.Fatalf("inspect: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if r := rows[0]; r["source"] != "sequence" || r["key"] != "numbers" || r["length"] != 3.0 || r["pending"] != nil {
		t.Errorf("inspect row: %v", r)
	}

	code, _, errs = runCLI(t, "dlq", "list", "count", path)
	want := `flowrun dlq list: pipeline "count" has a sequence source, whose dead letters dlq cannot reach; dlq supports stream, claiming, reclaim, list, pubsub and schedule sources`
	if code != cli.ExitConfig || strings.TrimSpace(errs) != want {
		t.Errorf("dlq: exit %d, stderr %q, want %q", code, errs, want)
	}
}

func TestOutsideKindDiagnostics(t *testing.T) {
	path := writeHCL(t, `redis "main" {
  url = "redis://127.0.0.1:1"
}
pipeline "a" {
  source "sequence" {
    count = 0
  }
  rule "r" { outcome = "ack" }
}
pipeline "b" {
  source "stream" {
    stream = "s"
    count  = 3
    header "h" {}
  }
  sequence_step = 2
  rule "r" {
    outcome = "ack"
    emit "memory" {
      redis = "main"
      key   = "k"
    }
  }
}
pipeline "c" {
  source "sequense" {}
  rule "r" { outcome = "ack" }
}
`)
	code, _, errs := runCLI(t, "validate", path)
	want := strings.ReplaceAll(`F:5:3: error: Missing required argument: The argument "key" is required for a sequence source.
  source "sequence" {
  ^~~~~~~~~~~~~~~~~

F:6:13: error: Invalid value: "count" must be at least 1.
    count = 0
            ^

F:13:5: error: Unsupported argument: "count" is not valid on a stream source; it is taken by "sequence" sources.
    count  = 3
    ^~~~~

F:14:5: error: Unsupported block type: A header block is not valid on a stream source; it is taken by "sequence" sources.
    header "h" {}
    ^~~~~~~~~~

F:16:3: error: Unsupported argument: "sequence_step" only applies to a sequence source; this pipeline's source is a stream source.
  sequence_step = 2
  ^~~~~~~~~~~~~

F:20:7: error: Unsupported argument: "redis" only applies to stream, list and pubsub emits; a memory goes to this test's memory.
      redis = "main"
      ^~~~~

F:26:10: error: Unknown source kind: There is no source kind "sequense". Did you mean "sequence"? Source kinds are "stream", "claiming", "reclaim", "list", "pubsub", "file", "pipe", "schedule" and "sequence".
  source "sequense" {}
         ^~~~~~~~~~
`, "F:", path+":")
	if code != cli.ExitConfig || errs != want {
		t.Errorf("validate: exit %d, stderr:\n%s\nwant:\n%s", code, errs, want)
	}
}
