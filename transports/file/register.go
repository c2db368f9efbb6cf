package file

// The file kind and the record emit, registered with package transports.

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
)

// fileAttrs are the file source block's attributes: what the reference documents and Decode
// decodes.
var fileAttrs = []schema.Attr{
	schema.Path("path").Require().Describe("The stream file of records, relative to the HCL file that declares it."),
	schema.String("key").NonEmpty().DefaultDoc("every key but the pipeline's `dead_letter`").Describe("Read only the records with this key. It must not be the pipeline's `dead_letter`."),
	schema.Bool("follow").WithDefault(false).Describe("`false`: stop at the end of the file (a replay; `flowrun run` exits 0 once every record is settled); `true`: wait for records appended to it, as `tail -f`."),
	schema.Path("checkpoint").Describe("A file, relative to the HCL file, where flowrun stores the byte offset just past the last record whose settlement is final; a restart resumes there, so no settled record is handled again. Without it every run reads the file from the start."),
}

func init() {
	transports.Register(transports.Kind{
		Name:    "file",
		Order:   60,
		Attrs:   fileAttrs,
		Summary: "a file of JSON-lines records, replayed or followed",
		Doc:     fileDoc,
		Example: fileExample,
		New:     func() transports.Config { return &Config{} },
	})
	// Records (SPEC §3) go to standard output, or appended to a stream file with "path".
	transports.RegisterEmit(transports.EmitKind{
		Name:   "record",
		Order:  40,
		Doc:    "A JSON-lines record `{\"key\":…,\"headers\":{…},\"payload\":…}` on standard output, or appended to the stream file named by `path`.",
		Path:   true,
		GoesTo: "stdout or a file",
		Sink: func(t engine.Target, env *transports.Env) (engine.Sink, error) {
			if t.Path == "" {
				return codec.NewRecordSink(env.Stdout), nil
			}
			a, err := codec.OpenFileAppender(t.Path)
			if err != nil {
				return nil, err
			}
			env.OnClose(a.Close)
			return a, nil
		},
	})
}

// Config is a file source block, decoded: the source's Options, paths made absolute against
// the HCL file's folder, DeadLetter the pipeline's.
type Config struct {
	Options
}

var (
	_ transports.Config            = (*Config)(nil)
	_ transports.Inspector         = (*Config)(nil)
	_ transports.DeadLetterLocator = (*Config)(nil)
)

// Decode reads the source block.
func (c *Config) Decode(b *transports.Block) {
	a := b.Values(fileAttrs)
	c.Path = a.String("path")
	c.Key = a.String("key")
	c.Follow = a.Bool("follow")
	c.Checkpoint = a.String("checkpoint")
	c.DeadLetter = b.Pipeline.DeadLetter
	// The source skips records of the dead-letter key by itself, but not when told to read
	// exactly that key.
	b.RejectDeadLetterKey(c.Key)
}

// NaturalKey is the key filter ("" for every key).
func (c *Config) NaturalKey() string { return c.Key }

// Capabilities: nothing is acknowledged natively.
func (c *Config) Capabilities() engine.Capabilities { return engine.Capabilities{} }

// Build opens the stream file.
func (c *Config) Build(_ context.Context, env *transports.Env) (engine.Source, error) {
	s, err := New(c.Options, env.Logger)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Inspect names the file, relative to the working folder when it lies below it; there is
// nothing in Redis to count.
func (c *Config) Inspect(context.Context, *transports.Env) (transports.Stats, error) {
	key := c.Path
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, c.Path); err == nil && !strings.HasPrefix(rel, "..") {
			key = rel
		}
	}
	return transports.Stats{Key: key}, nil
}

// DeadLettersAt: dead letters are appended to the stream file itself.
func (c *Config) DeadLettersAt() string { return "records in its stream file, not in Redis" }
