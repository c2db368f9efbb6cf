package plugins

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
)

// durConfig exercises the decoder: durations at the top, in an optional nested block and in a
// list of labelled blocks, a pointer duration, and a plain attribute gohcl decodes.
type durConfig struct {
	Wait   time.Duration  `hcl:"wait,optional"`
	Grace  *time.Duration `hcl:"grace,optional"`
	Name   string         `hcl:"name,optional"`
	Retry  *retryBlock    `hcl:"retry,block"`
	Routes []routeBlock   `hcl:"route,block"`
}

type retryBlock struct {
	Base time.Duration `hcl:"base"`
	Max  time.Duration `hcl:"max,optional"`
}

type routeBlock struct {
	Name  string        `hcl:"name,label"`
	After time.Duration `hcl:"after"`
}

// lastBlock records the Block Validate was given; Validate has no other way to pass anything on.
var lastBlock Block

func init() {
	nop := func(context.Context, durConfig, Env) (Handler, error) {
		return HandlerFunc(func(context.Context, Message, *Emitter) (Outcome, error) { return Ack(), nil }), nil
	}
	Register(Spec[durConfig]{
		Name:     "test-durations",
		Defaults: func() durConfig { return durConfig{Wait: time.Second, Retry: &retryBlock{Max: time.Minute}} },
		Validate: func(c durConfig, b Block) error {
			lastBlock = b
			var errs []error
			if c.Name == "bad" {
				errs = append(errs, b.Errorf("name", "Bad name", "%q is not allowed.", c.Name))
			}
			if c.Name == "wrapped" {
				errs = append(errs, fmt.Errorf("while checking: %w", b.Errorf("name", "Bad name", "wrapped.")))
			}
			if c.Name == "plain" {
				errs = append(errs, errors.New("plain error"))
			}
			if c.Name == "diag" {
				errs = append(errs, hcl.Diagnostics{{Severity: hcl.DiagWarning, Summary: "Careful", Detail: "an hcl diagnostic."}})
			}
			if c.Retry != nil && c.Retry.Base > c.Retry.Max {
				rb, _ := b.Child("retry")
				errs = append(errs, rb.Errorf("base", "Invalid value", `"base" (%s) must not exceed "max" (%s).`, c.Retry.Base, c.Retry.Max))
			}
			return errors.Join(errs...)
		},
		Provision: nop,
	})
}

func TestDecode(t *testing.T) {
	grace := 3 * time.Second
	tests := []struct {
		name  string
		src   string
		diags []string
		want  durConfig
	}{
		{name: "defaults", src: `handler "test-durations" {}`,
			want: durConfig{Wait: time.Second, Retry: &retryBlock{Max: time.Minute}}},
		{name: "set", src: "handler \"test-durations\" {\n  wait = \"250ms\"\n  grace = \"3s\"\n  name = \"x\"\n" +
			"  retry {\n    base = \"1s\"\n  }\n  route \"a\" {\n    after = \"1m30s\"\n  }\n  route \"b\" {\n    after = \"0s\"\n  }\n}",
			want: durConfig{Wait: 250 * time.Millisecond, Grace: &grace, Name: "x", Retry: &retryBlock{Base: time.Second, Max: time.Minute},
				Routes: []routeBlock{{Name: "a", After: 90 * time.Second}, {Name: "b"}}}},
		{name: "null pointer duration", src: "handler \"test-durations\" {\n  grace = null\n}",
			want: durConfig{Wait: time.Second, Retry: &retryBlock{Max: time.Minute}}},
		{
			name:  "bad duration at its value",
			src:   "handler \"test-durations\" {\n  wait = \"soon\"\n}",
			diags: []string{`dir/h.hcl:2:10: Invalid duration: "soon" is not a duration: invalid duration "soon". Write a Go duration such as "250ms", "30s" or "1h".`},
		},
		{
			name:  "a number has no unit",
			src:   "handler \"test-durations\" {\n  wait = 5\n}",
			diags: []string{`dir/h.hcl:2:10: Invalid duration: "5" is not a duration: missing unit in duration "5". Write a Go duration such as "250ms", "30s" or "1h".`},
		},
		{
			name:  "negative",
			src:   "handler \"test-durations\" {\n  wait = \"-1s\"\n}",
			diags: []string{`dir/h.hcl:2:10: Invalid value: "wait" must not be negative.`},
		},
		{
			// A type error stops before validation: no follow-on noise.
			name:  "type error",
			src:   "handler \"test-durations\" {\n  wait = [1]\n  name = \"bad\"\n}",
			diags: []string{`dir/h.hcl:2:10: Unsuitable value type: Unsuitable value: string required, but have tuple`},
		},
		{
			name: "nested durations",
			src:  "handler \"test-durations\" {\n  retry {\n    base = \"x\"\n  }\n  route \"a\" {\n    after = \"-2s\"\n  }\n}",
			diags: []string{
				`dir/h.hcl:3:12: Invalid duration: "x" is not a duration: invalid duration "x". Write a Go duration such as "250ms", "30s" or "1h".`,
				`dir/h.hcl:6:13: Invalid value: "after" must not be negative.`,
			},
		},
		{
			// Missing attributes and blocks are reported at the header of the block that lacks
			// them, not at its opening brace.
			name: "missing nested attribute at the nested header",
			src:  "handler \"test-durations\" {\n  retry {\n  }\n  route \"r\" {}\n}",
			diags: []string{
				`dir/h.hcl:2:3: Missing required argument: The argument "base" is required, but no definition was found.`,
				`dir/h.hcl:4:3: Missing required argument: The argument "after" is required, but no definition was found.`,
			},
		},
		{
			name:  "duplicate block",
			src:   "handler \"test-durations\" {\n  retry {\n    base = \"1s\"\n  }\n  retry {\n    base = \"1s\"\n  }\n}",
			diags: []string{`dir/h.hcl:5:3: Duplicate retry block: Only one retry block is allowed. Another was defined at dir/h.hcl:2,3-8.`},
		},
		{
			name:  "unknown attribute",
			src:   "handler \"test-durations\" {\n  wiat = \"1s\"\n}",
			diags: []string{`dir/h.hcl:2:3: Unsupported argument: An argument named "wiat" is not expected here. Did you mean "wait"?`},
		},
		{
			name:  "validate: at the attribute",
			src:   "handler \"test-durations\" {\n  name = \"bad\"\n}",
			diags: []string{`dir/h.hcl:2:10: Bad name: "bad" is not allowed.`},
		},
		{
			name:  "validate: wrapped keeps the wrapper's words",
			src:   "handler \"test-durations\" {\n  name = \"wrapped\"\n}",
			diags: []string{`dir/h.hcl:2:10: Bad name: while checking: wrapped.`},
		},
		{
			name:  "validate: a plain error at the header",
			src:   "handler \"test-durations\" {\n  name = \"plain\"\n}",
			diags: []string{`dir/h.hcl:1:1: Invalid handler configuration: plain error`},
		},
		{
			name:  "validate: hcl diagnostics as they are",
			src:   "handler \"test-durations\" {\n  name = \"diag\"\n}",
			diags: []string{`?: Careful: an hcl diagnostic.`},
			want:  durConfig{Wait: time.Second, Name: "diag", Retry: &retryBlock{Max: time.Minute}},
		},
		{
			name:  "validate: inside a nested block",
			src:   "handler \"test-durations\" {\n  retry {\n    base = \"5m\"\n  }\n}",
			diags: []string{`dir/h.hcl:3:12: Invalid value: "base" (5m0s) must not exceed "max" (1m0s).`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, diags := decodeHandler(t, "dir/h.hcl", tt.src)
			if got := formatDiags(diags); !slices.Equal(got, tt.diags) {
				t.Fatalf("diagnostics:\n got %q\nwant %q", got, tt.diags)
			}
			if diags.HasErrors() {
				if cfg != nil {
					t.Fatalf("config %v with errors", cfg.Value())
				}
				return
			}
			got := cfg.Value().(durConfig)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("config\n got %+v %v %+v\nwant %+v %v %+v", got, derefDur(got.Grace), got.Retry, tt.want, derefDur(tt.want.Grace), tt.want.Retry)
			}
		})
	}
}

func derefDur(d *time.Duration) string {
	if d == nil {
		return "nil"
	}
	return d.String()
}

// Each decode starts from fresh defaults: a nested default block is not shared between loads.
func TestDecodeFreshDefaults(t *testing.T) {
	a, _ := decodeHandler(t, "h.hcl", "handler \"test-durations\" {\n  retry {\n    base = \"2s\"\n  }\n}")
	b, _ := decodeHandler(t, "h.hcl", `handler "test-durations" {}`)
	if ra, rb := a.Value().(durConfig).Retry, b.Value().(durConfig).Retry; ra == rb || rb.Base != 0 || ra.Base != 2*time.Second {
		t.Fatalf("retry blocks %+v and %+v", ra, rb)
	}
}

func TestBlockHelpers(t *testing.T) {
	_, diags := decodeHandler(t, "conf/h.hcl", "handler \"test-durations\" {\n  wait = \"2s\"\n  retry {\n    base = \"1s\"\n  }\n}")
	if diags.HasErrors() {
		t.Fatal(formatDiags(diags))
	}
	b := lastBlock
	at := func(err error) string {
		var diags hcl.Diagnostics = errorDiags(err, b.def)
		return fmt.Sprintf("%d:%d", diags[0].Subject.Start.Line, diags[0].Subject.Start.Column)
	}
	if got := at(b.Errorf("wait", "S", "d")); got != "2:10" {
		t.Errorf("Errorf(wait) at %s, want the value at 2:10", got)
	}
	for _, attr := range []string{"absent", ""} {
		if got := at(b.Errorf(attr, "S", "d")); got != "1:1" {
			t.Errorf("Errorf(%q) at %s, want the header at 1:1", attr, got)
		}
	}
	if rb, ok := b.Child("retry"); !ok || at(rb.Errorf("base", "S", "d")) != "4:12" || at(rb.Errorf("max", "S", "d")) != "3:3" {
		t.Errorf("Child(retry): %v", ok)
	}
	if _, ok := b.Child("route"); ok {
		t.Error("Child(route) found a block that was not written")
	}
	abs, _ := filepath.Abs("conf")
	for in, want := range map[string]string{"ca.pem": filepath.Join(abs, "ca.pem"), "/etc/x/../ca.pem": "/etc/ca.pem"} {
		if got := b.Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
		if got := (Env{dir: abs}).Path(in); got != want {
			t.Errorf("Env.Path(%q) = %q, want %q", in, got, want)
		}
	}
}

// Provision gets the config as decoded, and the directory of the file for Env.Path.
func TestProvision(t *testing.T) {
	type cfg struct {
		File string `hcl:"file"`
	}
	var got cfg
	var gotPath, gotPipeline string
	Register(Spec[cfg]{
		Name: "test-provision",
		Provision: func(_ context.Context, c cfg, env Env) (Handler, error) {
			got, gotPath, gotPipeline = c, env.Path(c.File), env.Pipeline
			if c.File == "fail" {
				return nil, errors.New("cannot")
			}
			if c.File == "nil" {
				return nil, nil
			}
			return HandlerFunc(func(context.Context, Message, *Emitter) (Outcome, error) { return Ack(), nil }), nil
		},
	})
	dir := t.TempDir()
	d, diags := decodeHandler(t, filepath.Join(dir, "h.hcl"), "handler \"test-provision\" {\n  file = \"x.pem\"\n}")
	if diags.HasErrors() {
		t.Fatal(formatDiags(diags))
	}
	if _, err := d.Provision(context.Background(), handlers.Env{Pipeline: "p", Logger: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	if got.File != "x.pem" || gotPath != filepath.Join(dir, "x.pem") || gotPipeline != "p" {
		t.Fatalf("Provision saw %+v, Path %q, pipeline %q", got, gotPath, gotPipeline)
	}
	for file, want := range map[string]string{"fail": "cannot", "nil": "Provision returned a nil Handler and no error"} {
		d, _ := decodeHandler(t, "h.hcl", fmt.Sprintf("handler \"test-provision\" {\n  file = %q\n}", file))
		if _, err := d.Provision(context.Background(), handlers.Env{Logger: zerolog.Nop()}); err == nil || err.Error() != want {
			t.Errorf("Provision with %s: err %v, want %q", file, err, want)
		}
	}
}

func TestRegisterPanics(t *testing.T) {
	ok := func(context.Context, struct{}, Env) (Handler, error) { return nil, nil }
	type badBlock struct {
		B string `hcl:"b,block"`
	}
	type badLabel struct {
		B []struct {
			N int `hcl:"n,label"`
		} `hcl:"b,block"`
	}
	tests := map[string]func(){
		"empty name":   func() { Register(Spec[struct{}]{Provision: ok}) },
		"no Provision": func() { Register(Spec[struct{}]{Name: "test-panic"}) },
		"duplicate":    func() { Register(Spec[struct{}]{Name: "log", Provision: ok}) },
		"not a struct": func() {
			Register(Spec[string]{Name: "test-panic", Provision: func(context.Context, string, Env) (Handler, error) { return nil, nil }})
		},
		"bad block": func() {
			Register(Spec[badBlock]{Name: "test-panic", Provision: func(context.Context, badBlock, Env) (Handler, error) { return nil, nil }})
		},
		"bad label": func() {
			Register(Spec[badLabel]{Name: "test-panic", Provision: func(context.Context, badLabel, Env) (Handler, error) { return nil, nil }})
		},
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(fmt.Sprint(r), "plugins: ") {
					t.Fatalf("recovered %v, want a plugins: panic", r)
				}
			}()
			f()
		})
	}
	if _, ok := handlers.Lookup("test-panic"); ok {
		t.Fatal("a refused handler was registered")
	}
}

func TestBuiltinsRegistered(t *testing.T) {
	names := handlers.Names()
	for _, want := range []string{"exec", "http", "log"} {
		if !slices.Contains(names, want) {
			t.Errorf("%q not registered: %q", want, names)
		}
	}
}

// The zero Outcome is never an ack: without an error it is one, and the delivery is retried.
func TestZeroOutcomeIsAnError(t *testing.T) {
	h := HandlerFunc(func(_ context.Context, _ Message, emit *Emitter) (Outcome, error) {
		emit.Emit(ToStream("s"), []byte("x"), nil)
		return Outcome{}, nil
	})
	res := call(h, message("{}", nil, 1))
	if res.Outcome != Retry() || !errors.Is(res.Err, errNoOutcome) || res.Emits != nil {
		t.Fatalf("Call: outcome %s, err %v, emits %v; want retry with errNoOutcome and no emits", res.Outcome, res.Err, res.Emits)
	}
	if !strings.Contains(res.Err.Error(), "plugins.Ack()") {
		t.Errorf("error %q does not say what to return", res.Err)
	}
	er := (&adapter{h: h, log: zerolog.Nop()}).Handle(context.Background(), &engine.Delivery{Attempt: 1})
	if er.Outcome != engine.Retry() || er.Err == nil || er.Emits != nil {
		t.Fatalf("engine result %+v, want retry with an error", er)
	}
}

func TestOutcomeWithError(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		ret, want Outcome
	}{
		{Ack(), Retry()},
		{Drop(), Retry()},
		{Outcome{}, Retry()},
		{Retry(), Retry()},
		{RetryAfter(time.Minute), RetryAfter(time.Minute)},
		{DeadLetter("never"), DeadLetter("never")},
	}
	for _, tt := range tests {
		t.Run(tt.ret.String(), func(t *testing.T) {
			h := HandlerFunc(func(_ context.Context, _ Message, emit *Emitter) (Outcome, error) {
				emit.Emit(ToRecord("k"), []byte("x"), nil)
				return tt.ret, boom
			})
			res := call(h, message("", nil, 1))
			if res.Outcome != tt.want || !errors.Is(res.Err, boom) || res.Emits != nil {
				t.Fatalf("outcome %s, err %v, emits %v; want %s with the error and no emits", res.Outcome, res.Err, res.Emits, tt.want)
			}
		})
	}
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		o      Outcome
		str    string
		engine engine.Outcome
	}{
		{Ack(), "ack", engine.Ack()},
		{Drop(), "drop", engine.Drop()},
		{Retry(), "retry", engine.Retry()},
		{RetryAfter(5 * time.Second), "retry_after(5s)", engine.RetryAfter(5 * time.Second)},
		{RetryAfter(-time.Second), "retry_after(0s)", engine.RetryAfter(0)},
		{DeadLetter("no amount"), `dead_letter("no amount")`, engine.DeadLetter("no amount")},
		{Outcome{}, "none", engine.Retry()},
	}
	for _, tt := range tests {
		if tt.o.String() != tt.str || tt.o.engine() != tt.engine {
			t.Errorf("%s: engine %s, want %q and %s", tt.o, tt.o.engine(), tt.str, tt.engine)
		}
	}
	if d := RetryAfter(time.Minute); d.Delay() != time.Minute || d.Reason() != "" || Ack().Delay() != 0 || DeadLetter("r").Reason() != "r" {
		t.Error("Delay or Reason")
	}
}

// Emits reach the engine with typed targets resolved: the default redis block, a relative record
// file against the HCL file's directory.
func TestEmitTargets(t *testing.T) {
	dir := t.TempDir()
	h := HandlerFunc(func(_ context.Context, m Message, emit *Emitter) (Outcome, error) {
		headers := map[string]string{"trace": m.Header("trace")}
		emit.Emit(ToStream("s"), []byte("1"), headers)
		emit.Emit(ToStream("s").Via("cache"), []byte("2"), nil)
		emit.Emit(ToList("l"), []byte("3"), nil)
		emit.Emit(ToChannel("c"), []byte("4"), nil)
		emit.Emit(ToRecord("r"), []byte("5"), nil)
		emit.Emit(ToRecord("r").InFile("out/x.jsonl"), []byte("6"), nil)
		emit.Emit(ToRecord("r").InFile("/abs/../y.jsonl"), []byte("7"), nil)
		headers["trace"] = "changed after Emit" // Emit copied it
		return Ack(), nil
	})
	a := &adapter{h: h, log: zerolog.Nop(), redis: "main", dir: dir}
	res := a.Handle(context.Background(), &engine.Delivery{Message: engine.Message{Key: "in", Headers: map[string]string{"trace": "t"}}, Attempt: 1})
	if res.Outcome != engine.Ack() || res.Err != nil {
		t.Fatalf("outcome %s, err %v", res.Outcome, res.Err)
	}
	want := []string{
		"{stream main } s 1 map[trace:t]",
		"{stream cache } s 2 map[]",
		"{list main } l 3 map[]",
		"{pubsub main } c 4 map[]",
		"{record  } r 5 map[]",
		"{record  " + filepath.Join(dir, "out/x.jsonl") + "} r 6 map[]",
		"{record  /y.jsonl} r 7 map[]",
	}
	var got []string
	for _, e := range res.Emits {
		got = append(got, fmt.Sprintf("%v %s %s %v", e.Target, e.Message.Key, e.Message.Payload, e.Message.Headers))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("emits:\n got %q\nwant %q", got, want)
	}

	// Call reports targets as written, and they compare with ==.
	r := call(h, TestMessage{Key: "in"})
	if len(r.Emits) != 7 || r.Emits[1].To != ToStream("s").Via("cache") || r.Emits[5].To != ToRecord("r").InFile("out/x.jsonl") || r.Emits[0].To == ToList("s") {
		t.Fatalf("Call emits %v", r.Emits)
	}
	names := []string{}
	for _, e := range r.Emits[:6] {
		names = append(names, e.To.String())
	}
	if want := []string{`stream "s"`, `stream "s" via "cache"`, `list "l"`, `pubsub "c"`, `record "r"`, `record "r" in "out/x.jsonl"`}; !slices.Equal(names, want) {
		t.Errorf("String: %q, want %q", names, want)
	}
}

// A bad target fails the delivery (retry, logged), whatever the handler returned.
func TestEmitMistakes(t *testing.T) {
	tests := map[string]struct {
		to   Target
		want string
	}{
		"nil target":       {nil, "emit: no target: use ToStream, ToList, ToChannel or ToRecord"},
		"zero RedisTarget": {RedisTarget{}, "emit: the zero RedisTarget: use ToStream, ToList or ToChannel"},
		"empty key":        {ToList(""), `emit: list "": empty key`},
		"empty record key": {ToRecord(""), `emit: record "": empty key`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			h := HandlerFunc(func(_ context.Context, _ Message, emit *Emitter) (Outcome, error) {
				emit.Emit(ToRecord("fine"), nil, nil)
				emit.Emit(tt.to, []byte("x"), nil)
				return Ack(), nil
			})
			res := call(h, message("", nil, 1))
			if res.Outcome != Retry() || res.Err == nil || res.Err.Error() != tt.want || res.Emits != nil {
				t.Fatalf("outcome %s, err %v, emits %v; want retry with %q", res.Outcome, res.Err, res.Emits, tt.want)
			}
		})
	}
}

// An Emit after Handle returned (a goroutine left behind) is dropped and logged, never written
// with a later delivery.
func TestEmitAfterHandleReturned(t *testing.T) {
	var kept *Emitter
	h := HandlerFunc(func(_ context.Context, _ Message, emit *Emitter) (Outcome, error) {
		kept = emit
		return Ack(), nil
	})
	var logs strings.Builder
	o, emits, err := invoke(context.Background(), h, Message{d: &engine.Delivery{}}, zerolog.New(&logs))
	kept.Emit(ToRecord("late"), []byte("x"), nil)
	if o != Ack() || err != nil || len(emits) != 0 || len(kept.emits) != 0 {
		t.Fatalf("outcome %s, err %v, emits %v, kept %v", o, err, emits, kept.emits)
	}
	if !strings.Contains(logs.String(), "emit after Handle returned") {
		t.Fatalf("log %q", logs.String())
	}
}

// Message is a view: what a handler changes in what it returns never reaches the engine's copy.
func TestMessageIsReadOnly(t *testing.T) {
	d := &engine.Delivery{
		Message:       engine.Message{Key: "k", ID: "1-0", Headers: map[string]string{"b": "2", "a": "1", "c": "3"}, Payload: []byte("payload")},
		Attempt:       3,
		DeliveryCount: 4,
		IdleMS:        1500,
	}
	m := Message{d: d}
	p := m.Payload()
	p[0] = 'X'
	var names []string
	for k, v := range m.Headers() {
		names = append(names, k+"="+v)
		if k == "b" {
			break
		}
	}
	rest, _ := readAll(m)
	if string(d.Payload) != "payload" || rest != "payload" {
		t.Fatalf("payload %q, reader %q", d.Payload, rest)
	}
	if !slices.Equal(names, []string{"a=1", "b=2"}) {
		t.Fatalf("headers in order, stopping early: %q", names)
	}
	if m.Key() != "k" || m.ID() != "1-0" || m.Attempt() != 3 || m.DeliveryCount() != 4 || m.IdleMS() != 1500 || m.Header("c") != "3" || m.Header("z") != "" {
		t.Fatal("fields")
	}
	if _, ok := m.LookupHeader("z"); ok {
		t.Fatal("LookupHeader(z)")
	}
	var zero Message
	if zero.Key() != "" || zero.Payload() != nil || zero.Attempt() != 0 || zero.PayloadReader().Len() != 0 {
		t.Fatal("the zero Message")
	}
	for range zero.Headers() {
		t.Fatal("the zero Message has headers")
	}
}

func readAll(m Message) (string, error) {
	var b strings.Builder
	_, err := m.PayloadReader().WriteTo(&b)
	return b.String(), err
}

type lifecycle struct {
	HandlerFunc
	started, closed int
	err             error
}

func (l *lifecycle) Start(context.Context) error { l.started++; return l.err }
func (l *lifecycle) Close() error                { l.closed++; return l.err }

func TestStartClose(t *testing.T) {
	boom := errors.New("boom")
	l := &lifecycle{err: boom}
	a := &adapter{h: l}
	if err := a.Start(context.Background()); !errors.Is(err, boom) || l.started != 1 {
		t.Errorf("Start: err %v, started %d", err, l.started)
	}
	if err := a.Close(); !errors.Is(err, boom) || l.closed != 1 {
		t.Errorf("Close: err %v, closed %d", err, l.closed)
	}
	// Handlers without the hooks are fine.
	plain := &adapter{h: HandlerFunc(func(context.Context, Message, *Emitter) (Outcome, error) { return Ack(), nil })}
	if err := plain.Start(context.Background()); err != nil {
		t.Errorf("Start(plain) = %v", err)
	}
	if err := plain.Close(); err != nil {
		t.Errorf("Close(plain) = %v", err)
	}
}

// Backoff takes its arguments in the rule function's order, the attempt last.
func TestBackoff(t *testing.T) {
	tests := []struct {
		base, max time.Duration
		attempt   int
		cap       time.Duration
	}{
		{time.Second, time.Minute, 0, time.Second},
		{time.Second, time.Minute, 4, 8 * time.Second},
		{time.Second, time.Minute, 7, time.Minute},
		{time.Minute, time.Second, 3, time.Second},
		{0, time.Second, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.cap.String(), func(t *testing.T) {
			var hi time.Duration
			for range 2000 {
				d := Backoff(tt.base, tt.max, tt.attempt)
				if d < 0 || d > tt.cap {
					t.Fatalf("Backoff(%s, %s, %d) = %s, outside [0, %s]", tt.base, tt.max, tt.attempt, d, tt.cap)
				}
				hi = max(hi, d)
			}
			if hi < tt.cap*9/10 {
				t.Errorf("largest of 2000 draws %s, want near %s", hi, tt.cap)
			}
		})
	}
}
