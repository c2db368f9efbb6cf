package plugins

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/schema"
)

// Handler decides the fate of one delivery. Handle is called concurrently, up to the pipeline's
// concurrency at once, so a Handler must be safe for concurrent use.
//
// ctx is cancelled when a stop's grace period (the pipeline's shutdown_timeout) runs out, not
// at the stop signal itself. m is the message; emit takes the messages to write before the
// delivery is settled. A non-nil error counts as a retry (an Ack or Drop, or no outcome, with it
// becomes Retry; RetryAfter and DeadLetter stand), is logged with the message's key, id and
// attempt, and discards what was emitted. The zero Outcome without an error is a mistake: the
// delivery is retried and the mistake logged. A panic is recovered and counts as a retry.
type Handler interface {
	Handle(ctx context.Context, m Message, emit *Emitter) (Outcome, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m Message, emit *Emitter) (Outcome, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m Message, emit *Emitter) (Outcome, error) {
	return f(ctx, m, emit)
}

// Starter is an optional interface of a Handler. `flowrun run` calls Start once per pipeline,
// after every pipeline is provisioned and before the first delivery is read; an error stops the
// run before anything is consumed (exit code 2). ctx bounds start-up only: work that outlives
// Start must be stopped by Close.
type Starter interface {
	Start(ctx context.Context) error
}

// Closer is an optional interface of a Handler (io.Closer). `flowrun run` calls Close once,
// after the last Handle call has returned, and also when the run fails after Provision
// succeeded, so Close must cope with a handler that was never started.
type Closer interface {
	Close() error
}

// Spec registers one handler whose block body decodes into the config struct C.
type Spec[C any] struct {
	// Name is what a pipeline's handler "NAME" block refers to.
	Name string
	// Doc is one line shown by `flowrun plugins`.
	Doc string
	// Body documents the block's attributes and blocks (type, default, meaning) for the reference
	// in docs/; nil for a handler that does not document them. When set it must name exactly the
	// attributes and blocks of C's hcl tags: Register panics otherwise, so the two cannot drift.
	// An attribute declared with a typed default (schema.Duration("timeout").WithDefault(...))
	// has it set in C before decoding, so the reference shows the default decoding applies.
	Body *schema.Body
	// Defaults returns a config with the defaults set; decoding overwrites only the attributes
	// and blocks the user wrote. Nil means the zero C. A default Body declares need not be set
	// here; one set here too must agree with it (Register panics otherwise).
	Defaults func() C
	// Validate checks what the types cannot, at every load (`run`, `validate`, `test`), after
	// the body decoded cleanly. Make errors with b.Errorf, so that each points at its attribute,
	// and return them together (errors.Join); any other error is reported at the block's
	// header. It may read local files but must not connect anywhere, and does not change c:
	// Provision gets the config as decoded. Nil means no checks.
	Validate func(c C, b Block) error
	// Provision builds the handler from a config that decoded and validated cleanly: once per
	// pipeline that uses it by `flowrun run`, and once per test by `flowrun test`, which calls
	// Close but never Start. Keep slow I/O (dialing) for Start. An error stops the run before
	// anything is consumed; release what was acquired before returning it.
	Provision func(ctx context.Context, c C, env Env) (Handler, error)
	// Mock, for a handler that talks to the outside world, lets a test of a pipeline with it
	// have a `mock {}` block (SPEC §9) whose decoded value reaches Provision as Env.Mock: a
	// MockSpec, usually. Nil: a test runs the handler as compiled, and a mock block is an error.
	Mock Mocker
}

// Env is what Provision is given besides the config.
type Env struct {
	// Pipeline is the name of the pipeline the handler serves.
	Pipeline string
	// Logger is scoped to this pipeline and handler: it already carries the pipeline, source
	// and handler fields. Log with it, never with a global logger.
	Logger zerolog.Logger

	// Mock is what the test's mock block decoded into (Spec.Mock's DecodeMock), when `flowrun
	// test` provisions the handler for a test that has one; nil otherwise. Provision then builds
	// a handler that talks to it instead of the outside world.
	Mock any

	dir string // the directory of the HCL file that declares the handler

	// What a test's mock puts in place of the outside world (`flowrun test`); nil otherwise.
	transport http.RoundTripper // http: answers every request
	runner    execRunner        // exec: stands in for the process
}

// Path resolves p relative to the directory of the HCL file that declares the handler, as
// flowrun does for every path in its configuration (and as Block.Path does in Validate).
func (e Env) Path(p string) string { return resolvePath(e.dir, p) }

// Register adds a handler; call it from init. It panics on a programmer's mistake, found the
// first time the binary starts: an empty or duplicate name, no Provision, a C that is not a
// struct or whose hcl tags gohcl cannot use. A user's mistake in the HCL is a diagnostic.
func Register[C any](s Spec[C]) {
	if s.Name == "" || s.Provision == nil {
		panic("plugins: Register needs a Name and Provision")
	}
	if err := checkConfigType(reflect.TypeFor[C]()); err != nil {
		panic(fmt.Sprintf("plugins: Register %q: %v", s.Name, err))
	}
	if s.Body != nil {
		var defaults reflect.Value
		if s.Defaults != nil {
			defaults = reflect.ValueOf(s.Defaults())
		}
		if err := checkBody(s.Body, reflect.TypeFor[C]()); err != nil {
			panic(fmt.Sprintf("plugins: Register %q: %v", s.Name, err))
		}
		if err := checkDefaults(s.Body, reflect.TypeFor[C](), defaults); err != nil {
			panic(fmt.Sprintf("plugins: Register %q: %v", s.Name, err))
		}
	}
	p := handlers.Plugin{Name: s.Name, Doc: s.Doc, Decode: s.decode, Body: s.Body}
	if s.Mock != nil {
		if c, ok := s.Mock.(interface{ check() error }); ok {
			if err := c.check(); err != nil {
				panic(fmt.Sprintf("plugins: Register %q: %v", s.Name, err))
			}
		}
		p.MockBody = s.Mock.MockBody()
		p.DecodeMock = func(body hcl.Body, ctx *hcl.EvalContext, rng hcl.Range) (handlers.Mock, hcl.Diagnostics) {
			v, diags := s.Mock.DecodeMock(body, ctx, rng)
			if v == nil {
				return nil, diags // never a typed nil in the interface
			}
			return decodedMock{handler: s.Name, v: v}, diags
		}
	}
	handlers.Register(p)
}

// decode decodes a handler block's body into a fresh C and validates it.
func (s Spec[C]) decode(body hcl.Body, ctx *hcl.EvalContext, rng hcl.Range) (handlers.Config, hcl.Diagnostics) {
	var cfg C
	if s.Defaults != nil {
		cfg = s.Defaults()
	}
	applyDefaults(s.Body, reflect.ValueOf(&cfg).Elem())
	diags := decodeBody(body, ctx, reflect.ValueOf(&cfg).Elem(), rng)
	// A type error stops here: checks of a half-decoded config would only add noise. A value
	// that merely failed to parse (a duration) keeps its default, and the checks run, so the
	// user sees every mistake of the block at once, less what they say about that value.
	bad := map[hcl.Range]bool{}
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		if _, ok := d.Extra.(valueProblem); !ok || d.Subject == nil {
			return nil, diags
		}
		bad[*d.Subject] = true
	}
	if s.Validate != nil {
		for _, d := range errorDiags(s.Validate(cfg, newBlock(body, rng, &cfg)), rng) {
			if d.Subject == nil || !bad[*d.Subject] {
				diags = append(diags, d)
			}
		}
	}
	// In the order they were written, as if one pass had found them all.
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		if a.Subject == nil || b.Subject == nil || a.Subject.Filename != b.Subject.Filename {
			return 0
		}
		return a.Subject.Start.Byte - b.Subject.Start.Byte
	})
	if diags.HasErrors() {
		return nil, diags
	}
	return &decoded[C]{spec: s, cfg: cfg, dir: fileDir(rng.Filename)}, diags
}

// decoded is a handler block that decoded and validated cleanly (handlers.Config).
type decoded[C any] struct {
	spec Spec[C]
	cfg  C
	dir  string
}

func (d *decoded[C]) Value() any { return d.cfg }

// provision calls the author's Provision.
func (d *decoded[C]) provision(ctx context.Context, env Env) (Handler, error) {
	env.dir = d.dir
	h, err := d.spec.Provision(ctx, d.cfg, env)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("Provision returned a nil Handler and no error")
	}
	return h, nil
}

func (d *decoded[C]) Provision(ctx context.Context, env handlers.Env) (handlers.Instance, error) {
	penv := Env{Pipeline: env.Pipeline, Logger: env.Logger}
	if env.Mock != nil {
		// Only this handler's own kind of mock: an exec handler given an http mock would run
		// the real process.
		m, ok := env.Mock.(decodedMock)
		if !ok || d.spec.Mock == nil || m.handler != d.spec.Name {
			return nil, fmt.Errorf("handler %q cannot be mocked with %s", d.spec.Name, env.Mock)
		}
		penv.Mock = m.v
		if in, ok := m.v.(interface{ install(*Env) }); ok {
			in.install(&penv) // a built-in's mock stands in for its transport or process
		}
	}
	h, err := d.provision(ctx, penv)
	if err != nil {
		return nil, err
	}
	return &adapter{h: h, log: env.Logger, redis: env.Redis, dir: d.dir}, nil
}

// adapter runs a Handler as the engine's handler.
type adapter struct {
	h     Handler
	log   zerolog.Logger
	redis string // for Redis targets naming no redis block
	dir   string // for relative record files
}

var _ handlers.Instance = (*adapter)(nil)

func (a *adapter) Handle(ctx context.Context, d *engine.Delivery) engine.Result {
	o, emits, err := invoke(ctx, a.h, Message{d: d}, a.log)
	res := engine.Result{Outcome: o.engine(), Err: err}
	if len(emits) > 0 {
		res.Emits = make([]engine.Emit, 0, len(emits))
	}
	for _, e := range emits { // Emit checked each target
		t, key := e.To.engine(a.dir, a.redis)
		res.Emits = append(res.Emits, engine.Emit{Target: t, Message: &engine.Message{Key: key, Headers: e.Headers, Payload: e.Payload}})
	}
	return res
}

func (a *adapter) Start(ctx context.Context) error {
	if s, ok := a.h.(Starter); ok {
		return s.Start(ctx)
	}
	return nil
}

func (a *adapter) Close() error {
	if c, ok := a.h.(Closer); ok {
		return c.Close()
	}
	return nil
}

// invoke calls h.Handle and applies the rules every caller shares (the engine through the
// adapter, tests through Call): an emit error or a missing outcome is an error, an error turns
// an ack, a drop or no outcome into a retry and discards the emits and the output; without one,
// the output is written into the delivery's run.
func invoke(ctx context.Context, h Handler, m Message, log zerolog.Logger) (Outcome, []Emitted, error) {
	em := &Emitter{log: log, inRun: m.inRun()}
	defer em.close() // also on a panic, so a late Emit from a goroutine is dropped and logged
	o, err := h.Handle(ctx, m, em)
	emits, emitErr := em.close()
	if err == nil {
		err = emitErr
	}
	if err == nil && em.output != nil {
		m.d.Run.Output, m.d.Run.HasOutput = em.output, true
	}
	if err == nil && o.kind == outcomeNone {
		err = errNoOutcome
	}
	if err != nil {
		if o.kind == outcomeNone || o.kind == outcomeAck || o.kind == outcomeDrop {
			o = Retry()
		}
		return o, nil, err
	}
	return o, emits, nil
}

// fileDir is the absolute directory of an HCL file ("" for no file: the working directory).
func fileDir(filename string) string {
	if filename == "" {
		return ""
	}
	dir := filepath.Dir(filename)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return dir
}

// resolvePath resolves p against dir (the working directory when dir is ""), cleaned.
func resolvePath(dir, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}
