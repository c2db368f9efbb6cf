package config

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/plugins"
	"github.com/flowrun/flowrun/transports"
	"github.com/flowrun/flowrun/transports/file"
	"github.com/flowrun/flowrun/transports/pipe"
	"github.com/flowrun/flowrun/transports/redislist"
	"github.com/flowrun/flowrun/transports/redispubsub"
	"github.com/flowrun/flowrun/transports/redisstream"
)

// decoded returns what a built-in kind decoded: its transport's Options, and the dead-letter
// key it keeps for inspect and dlq.
func decoded(t *testing.T, c transports.Config) (any, string) {
	t.Helper()
	switch c := c.(type) {
	case *redisstream.Config:
		return c.Options, c.DeadLetter
	case *redislist.Config:
		return c.Options, c.DeadLetter
	case *redispubsub.Config:
		return c.Options, c.DeadLetter
	case *file.Config:
		return c.Options, c.DeadLetter
	case *pipe.Config:
		return c.Options, ""
	}
	t.Fatalf("not a built-in kind's config: %T", c)
	return nil, ""
}

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// mustLoad loads paths and fails the test on any diagnostic.
func mustLoad(t *testing.T, paths ...string) *Config {
	t.Helper()
	cfg, diags := Load(paths, Options{Hostname: "host1"})
	if len(diags) > 0 {
		var b bytes.Buffer
		WriteDiagnostics(&b, cfg.Files(), diags)
		t.Fatalf("unexpected diagnostics:\n%s", b.String())
	}
	return cfg
}

func TestLoadValid(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_PASSWORD", "s3cret")
	cfg := mustLoad(t, "testdata/valid")
	dir := abs(t, "testdata/valid")
	main := filepath.Join("testdata", "valid", "a_payouts.hcl")
	pipes := filepath.Join("testdata", "valid", "b_pipes.hcl")

	t.Run("redis", func(t *testing.T) {
		want := []*Redis{{
			Name:     "main",
			URL:      "redis://127.0.0.1:6379/0",
			Username: "flowrun",
			Password: "s3cret",
			TLS:      &TLS{CAFile: filepath.Join(dir, "certs/ca.pem"), ServerName: "redis"},
			DeclRange: hcl.Range{Filename: main,
				Start: hcl.Pos{Line: 1, Column: 1, Byte: 0}, End: hcl.Pos{Line: 1, Column: 13, Byte: 12}},
		}}
		for _, r := range cfg.Redis {
			r.fingerprint = "" // TestFingerprint covers it
		}
		if !reflect.DeepEqual(cfg.Redis, want) {
			t.Fatalf("redis:\n got %+v\nwant %+v", cfg.Redis[0], want[0])
		}
	})

	type pipelineWant struct {
		name, file string
		source     Source   // Kind and Redis
		options    any      // what the kind decoded: its transport's Options
		deadLetter string   // the dead letter the kind keeps for inspect and dlq
		p          Pipeline // scalar fields only
		rules      []string // names
		otherwise  string
		handler    string
	}
	wants := []pipelineWant{
		{
			name: "payouts", file: main,
			source: Source{Kind: "claiming", Redis: "main"},
			options: redisstream.Options{Kind: "claiming", Stream: "payouts", Group: "payouts", Consumer: "worker-1",
				Start: "0", MinIdle: 30 * time.Second, Batch: 100, Block: time.Second, DelayedRetry: "runtime"},
			deadLetter: "payouts.dlq",
			p: Pipeline{Concurrency: 16, MaxAttempts: 3, DeadLetter: "payouts.dlq",
				ShutdownTimeout: 30 * time.Second, CanRetry: true},
			rules: []string{"too-large", "gateway-down", "ok"},
		},
		{
			name: "replay", file: pipes,
			source: Source{Kind: "file"},
			options: file.Options{Path: filepath.Join(dir, "data/orders.jsonl"), Key: "orders",
				Follow: true, Checkpoint: filepath.Join(dir, "data/orders.offset")},
			p:     Pipeline{Concurrency: runtime.NumCPU(), ShutdownTimeout: 30 * time.Second, CanRetry: true},
			rules: []string{"copy"}, otherwise: "drop",
		},
		{
			name: "stdin", file: pipes,
			source:  Source{Kind: "pipe"},
			options: pipe.Options{OutRetry: "again"},
			p:       Pipeline{Concurrency: runtime.NumCPU(), ShutdownTimeout: 30 * time.Second, CanRetry: true},
			handler: "log",
		},
		{
			name: "queue", file: pipes,
			source: Source{Kind: "list", Redis: "main"},
			options: redislist.Options{Key: "jobs", Reliable: true, Consumer: "host1",
				Processing: "jobs:processing:host1", Batch: 100, Block: time.Second, DelayedRetry: "runtime"},
			p:     Pipeline{Concurrency: runtime.NumCPU(), ShutdownTimeout: 30 * time.Second},
			rules: []string{"all"},
		},
		{
			name: "events", file: pipes,
			source:  Source{Kind: "pubsub", Redis: "main"},
			options: redispubsub.Options{Patterns: []string{"events.*"}, RetryTo: "events.retry"},
			p:       Pipeline{Concurrency: runtime.NumCPU(), ShutdownTimeout: 30 * time.Second, CanRetry: true},
			rules:   []string{"flaky"},
		},
		{
			name: "news", file: pipes,
			source:  Source{Kind: "pubsub", Redis: "main"},
			options: redispubsub.Options{Patterns: []string{"news.*"}},
			p:       Pipeline{Concurrency: runtime.NumCPU(), ShutdownTimeout: 30 * time.Second},
			rules:   []string{"all"},
		},
		{
			name: "durable", file: pipes,
			source: Source{Kind: "stream", Redis: "main"},
			options: redisstream.Options{Kind: "stream", Stream: "{jobs}", Group: "durable", Consumer: "host1",
				Start: "0", Batch: 100, Block: time.Second, DelayedRetry: "durable_zset", DelayKey: "{jobs}:delayed"},
			p:     Pipeline{Concurrency: 2, ShutdownTimeout: 30 * time.Second, CanRetry: true},
			rules: []string{"all"},
		},
	}
	if len(cfg.Pipelines) != len(wants) {
		t.Fatalf("got %d pipelines, want %d", len(cfg.Pipelines), len(wants))
	}
	for i, w := range wants {
		t.Run("pipeline "+w.name, func(t *testing.T) {
			p := cfg.Pipelines[i]
			if p.Name != w.name || p.File != w.file {
				t.Fatalf("pipeline %d: got %q in %q, want %q in %q", i, p.Name, p.File, w.name, w.file)
			}
			if src := p.Source; src.Kind != w.source.Kind || src.Redis != w.source.Redis {
				t.Errorf("source: got %s on %q, want %s on %q", src.Kind, src.Redis, w.source.Kind, w.source.Redis)
			}
			opts, dl := decoded(t, p.Source.Config)
			if !reflect.DeepEqual(opts, w.options) || dl != w.deadLetter {
				t.Errorf("source config:\n got %+v, dead letter %q\nwant %+v, dead letter %q", opts, dl, w.options, w.deadLetter)
			}
			got := Pipeline{Concurrency: p.Concurrency, MaxAttempts: p.MaxAttempts, DeadLetter: p.DeadLetter,
				ShutdownTimeout: p.ShutdownTimeout, CanRetry: p.CanRetry}
			if !reflect.DeepEqual(got, w.p) {
				t.Errorf("pipeline:\n got %+v\nwant %+v", got, w.p)
			}
			if w.handler != "" {
				if p.Handler == nil || p.Handler.Name != w.handler || p.Rules != nil {
					t.Fatalf("handler: got %+v, rules %v", p.Handler, p.Rules)
				}
				return
			}
			if p.Handler != nil || p.Rules == nil {
				t.Fatalf("want rules, got handler %+v", p.Handler)
			}
			var names []string
			for _, r := range p.Rules.Rules {
				names = append(names, r.Name)
			}
			if !reflect.DeepEqual(names, w.rules) {
				t.Errorf("rules: got %q, want %q", names, w.rules)
			}
			gotOtherwise := ""
			if p.Rules.Otherwise != nil {
				gotOtherwise = p.Rules.Otherwise.String()
			}
			if gotOtherwise != w.otherwise {
				t.Errorf("otherwise: got %q, want %q", gotOtherwise, w.otherwise)
			}
		})
	}

	t.Run("payouts rules", func(t *testing.T) {
		rs := cfg.Pipeline("payouts").Rules.Rules
		if got := rs[0].When.String(); got != "payload.amount > 10000" {
			t.Errorf("when: %q", got)
		}
		if got := rs[1].Outcome.String(); got != "retry_after('5s')" {
			t.Errorf("outcome: %q", got)
		}
		if rs[2].When != nil {
			t.Errorf("rule ok: when should be nil (always)")
		}
		if len(rs[2].Emits) != 1 {
			t.Fatalf("emits: %d", len(rs[2].Emits))
		}
		e := rs[2].Emits[0]
		if e.Target != (engine.Target{Kind: "stream", Redis: "main"}) || e.Key != "payouts.done" {
			t.Errorf("emit: %+v %q", e.Target, e.Key)
		}
		if e.Payload.String() != "{'id': payload.id, 'paid': true}" {
			t.Errorf("payload: %q", e.Payload.String())
		}
		if !reflect.DeepEqual(e.HeaderOrder, []string{"source", "attempt"}) || e.Headers["source"].String() != "'flowrun'" ||
			e.Headers["attempt"].String() != "attempt" {
			t.Errorf("headers: %q %v", e.HeaderOrder, e.Headers)
		}
		// The payouts example behaves as the spec says.
		res := cfg.Pipeline("payouts").Rules.Handle(t.Context(), &engine.Delivery{
			Message: engine.Message{Key: "payouts", Headers: map[string]string{}, Payload: []byte(`{"id":1,"amount":20000}`)}, Attempt: 1})
		if res.Outcome != engine.Drop() {
			t.Errorf("large payout: got %v", res.Outcome)
		}
	})

	t.Run("replay rules", func(t *testing.T) {
		r := cfg.Pipeline("replay").Rules.Rules[0]
		if got := r.When.String(); got != "key == 'orders' &&\n  attempt < 3\n" {
			t.Errorf("heredoc when: %q", got)
		}
		want := []engine.Target{
			{Kind: "record", Path: filepath.Join(dir, "out/copy.jsonl")},
			{Kind: "list", Redis: "main"}, // no redis on the source: the only block
		}
		for i, e := range r.Emits {
			if e.Target != want[i] {
				t.Errorf("emit %d: got %+v, want %+v", i, e.Target, want[i])
			}
			if e.Payload != nil {
				t.Errorf("emit %d: payload should default to nil (unchanged)", i)
			}
		}
	})

	t.Run("tests", func(t *testing.T) {
		want := []*Test{
			{Name: "large payouts are dropped", Pipeline: "payouts",
				Message: TestMessage{Key: "payouts", Payload: []byte(`{"amount":20000,"id":1}`), Attempt: 1},
				Expect:  TestExpect{Outcome: "drop", Want: engine.Drop()}},
			{Name: "gateway down", Pipeline: "payouts",
				Message: TestMessage{Key: "other", Payload: []byte("{\"id\": 2, \"amount\": 5}\n"),
					Headers: map[string]string{"gateway": "down"}, Attempt: 2},
				Expect: TestExpect{Outcome: "retry_after('5s')", Want: engine.RetryAfter(5 * time.Second)}},
			{Name: "ok emits", Pipeline: "payouts",
				Message: TestMessage{Key: "payouts", Payload: []byte(`{"amount":1,"id":7}`), Attempt: 1},
				Expect: TestExpect{Outcome: "ack", Want: engine.Ack(), HasEmits: true, Emits: []TestEmit{
					{Kind: "stream", Key: "payouts.done", Payload: `{"id":7,"paid":true}`, HasPayload: true},
					{Kind: "record", Key: "audit", Payload: "raw text", HasPayload: true},
				}}},
		}
		if len(cfg.Tests) != len(want) {
			t.Fatalf("got %d tests", len(cfg.Tests))
		}
		for i, w := range want {
			got := *cfg.Tests[i]
			if got.ExpectRange.Filename != main || got.ExpectRange.Start.Line == 0 {
				t.Errorf("test %q: expect range %v", got.Name, got.ExpectRange)
			}
			got.ExpectRange, got.DeclRange, got.pipelineRange, got.keySet = hcl.Range{}, hcl.Range{}, hcl.Range{}, false
			got.Expect.outcomeRange = hcl.Range{}
			if !reflect.DeepEqual(&got, w) {
				t.Errorf("test %d:\n got %+v\nwant %+v", i, got, *w)
			}
		}
	})

	if len(cfg.Files()) != 2 {
		t.Errorf("Files: got %d, want 2", len(cfg.Files()))
	}
}

func TestConsumerOverride(t *testing.T) {
	cfg, diags := Load([]string{"testdata/valid"}, Options{Hostname: "host1", Consumer: "cli"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for name, want := range map[string][2]string{
		"payouts": {"cli", ""},                    // written consumer overridden
		"queue":   {"cli", "jobs:processing:cli"}, // default processing follows it
	} {
		var consumer, processing string
		switch c := cfg.Pipeline(name).Source.Config.(type) {
		case *redisstream.Config:
			consumer = c.Consumer
		case *redislist.Config:
			consumer, processing = c.Consumer, c.Processing
		}
		if consumer != want[0] || processing != want[1] {
			t.Errorf("%s: consumer %q processing %q, want %q", name, consumer, processing, want)
		}
	}
}

func TestFunctions(t *testing.T) {
	t.Setenv("FLOWRUN_TEST_SET", "from-env")
	t.Setenv("FLOWRUN_TEST_EMPTY", "")
	dir := t.TempDir()
	write(t, filepath.Join(dir, "token.txt"), "tok\n")
	write(t, filepath.Join(dir, "f.hcl"), `
redis "r" {
  url      = env("FLOWRUN_TEST_UNSET_URL", "redis://h:1")
  username = env("FLOWRUN_TEST_SET")
  password = env("FLOWRUN_TEST_EMPTY", "default-not-used")
}
pipeline "p" {
  source "stream" {
    stream = "s-${env("FLOWRUN_TEST_SET")}"
    group  = trimspace_is_not_here_so_use(file("token.txt"))
  }
  rule "r" {
    outcome = "ack"
    emit "stream" {
      key     = jsonencode({ a = [1, "x"] })
      payload = env("FLOWRUN_TEST_UNSET_EXPR", "raw")
    }
  }
}
`)
	// The line with an unknown function is changed below; first check that it is reported.
	_, diags := Load([]string{dir}, Options{Hostname: "h"})
	if len(diags) != 1 || !strings.Contains(diags[0].Detail, `no function named "trimspace_is_not_here_so_use"`) {
		t.Fatalf("diags: %v", diags)
	}
	src := readFile(t, filepath.Join(dir, "f.hcl"))
	write(t, filepath.Join(dir, "f.hcl"), strings.Replace(src, `trimspace_is_not_here_so_use(file("token.txt"))`, `file("token.txt")`, 1))
	cfg, diags := Load([]string{dir}, Options{Hostname: "h"})
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	r := cfg.Redis[0]
	if r.URL != "redis://h:1" || r.Username != "from-env" || r.Password != "" {
		t.Errorf("redis: %+v", r)
	}
	s := cfg.Pipelines[0].Source.Config.(*redisstream.Config)
	if s.Stream != "s-from-env" || s.Group != "tok\n" {
		t.Errorf("source: stream %q group %q", s.Stream, s.Group)
	}
	e := cfg.Pipelines[0].Rules.Rules[0].Emits[0]
	if e.Key != `{"a":[1,"x"]}` || e.Payload.String() != "raw" {
		t.Errorf("emit: key %q payload %q", e.Key, e.Payload.String())
	}
}

func TestParseOutcome(t *testing.T) {
	for _, tc := range []struct {
		in       string
		want     engine.Outcome
		anyDelay bool
		err      bool
	}{
		{in: "ack", want: engine.Ack()},
		{in: " drop ", want: engine.Drop()},
		{in: "retry()", want: engine.Retry()},
		{in: "dead_letter", want: engine.DeadLetter("")},
		{in: "dead_letter()", want: engine.DeadLetter("")},
		{in: "retry_after", want: engine.RetryAfter(0), anyDelay: true},
		{in: "retry_after()", want: engine.RetryAfter(0), anyDelay: true},
		{in: "retry_after('0s')", want: engine.RetryAfter(0)},
		{in: "retry_after('5s')", want: engine.RetryAfter(5 * time.Second)},
		{in: `retry_after("1m30s")`, want: engine.RetryAfter(90 * time.Second)},
		{in: "retry_after(250ms)", want: engine.RetryAfter(250 * time.Millisecond)},
		{in: "retry_after( '2s' )", want: engine.RetryAfter(2 * time.Second)},
		{in: "retry_after('5')", err: true},
		{in: "retry_after('-5s')", err: true},
		{in: "retry_after('5s'", err: true},
		{in: "dead_letter('why')", err: true},
		{in: "ack(1)", err: true},
		{in: "accept", err: true},
		{in: "", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, anyDelay, err := ParseOutcome(tc.in)
			if (err != nil) != tc.err || got != tc.want || anyDelay != tc.anyDelay {
				t.Fatalf("ParseOutcome(%q) = %v, %v, %v", tc.in, got, anyDelay, err)
			}
		})
	}
}

func TestExpectMatches(t *testing.T) {
	exact := TestExpect{Outcome: "retry_after('5s')", Want: engine.RetryAfter(5 * time.Second)}
	anyDelay := TestExpect{Outcome: "retry_after", Want: engine.RetryAfter(0), AnyDelay: true}
	bounded := anyDelay
	bounded.MinDelay, bounded.MaxDelay, bounded.HasMaxDelay = 5*time.Second, 10*time.Second, true
	atMost := anyDelay
	atMost.MaxDelay, atMost.HasMaxDelay = 0, true
	dead := TestExpect{Outcome: "dead_letter", Want: engine.DeadLetter("")}
	deadWhy := TestExpect{Outcome: "dead_letter", Want: engine.DeadLetter(""), Reason: "http 400"}
	for _, tc := range []struct {
		name   string
		expect TestExpect
		got    engine.Outcome
		want   bool
		text   string
	}{
		{"ack", TestExpect{Outcome: "ack", Want: engine.Ack()}, engine.Ack(), true, "ack"},
		{"ack is not drop", TestExpect{Outcome: "ack", Want: engine.Ack()}, engine.Drop(), false, "ack"},
		{"exactly 5s", exact, engine.RetryAfter(5 * time.Second), true, "retry_after('5s')"},
		{"not 6s", exact, engine.RetryAfter(6 * time.Second), false, "retry_after('5s')"},
		{"any delay", anyDelay, engine.RetryAfter(time.Hour), true, "retry_after with any delay"},
		{"any delay, zero", anyDelay, engine.RetryAfter(0), true, "retry_after with any delay"},
		{"any delay is not retry", anyDelay, engine.Retry(), false, "retry_after with any delay"},
		{"lower bound included", bounded, engine.RetryAfter(5 * time.Second), true, "retry_after with a delay of 5s to 10s"},
		{"upper bound included", bounded, engine.RetryAfter(10 * time.Second), true, "retry_after with a delay of 5s to 10s"},
		{"below", bounded, engine.RetryAfter(4 * time.Second), false, "retry_after with a delay of 5s to 10s"},
		{"above", bounded, engine.RetryAfter(11 * time.Second), false, "retry_after with a delay of 5s to 10s"},
		{"max_delay 0s", atMost, engine.RetryAfter(time.Millisecond), false, "retry_after with a delay of at most 0s"},
		{"any reason", dead, engine.DeadLetter("http 500"), true, "dead_letter"},
		{"reason contained", deadWhy, engine.DeadLetter("http 400 Bad Request: no"), true, `dead_letter with a reason containing "http 400"`},
		{"other reason", deadWhy, engine.DeadLetter("http 404 Not Found"), false, `dead_letter with a reason containing "http 400"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.expect.Matches(tc.got); got != tc.want {
				t.Errorf("Matches(%s) = %v", tc.got, got)
			}
			if got := tc.expect.String(); got != tc.text {
				t.Errorf("String() = %q, want %q", got, tc.text)
			}
		})
	}
}

func TestMayRetry(t *testing.T) {
	for src, want := range map[string]bool{
		"ack":                                  false,
		"drop()":                               false,
		"attempt > 1 ? drop : ack":             false,
		"headers['x'] == 'retry' ? ack : drop": false,
		"retry":                                true,
		"attempt < 3 ? retry : drop":           true,
		"retry_after(backoff('1s', '5m'))":     true,
		"$env['re' + 'try']":                   true,
	} {
		if got := mayRetry(src); got != want {
			t.Errorf("mayRetry(%q) = %v, want %v", src, got, want)
		}
	}
}

func TestExprPositions(t *testing.T) {
	// Columns count characters, so a multi-byte character before the error shifts bytes only.
	dir := t.TempDir()
	write(t, filepath.Join(dir, "e.hcl"), "pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n"+
		"  rule \"é\" {\n    when    = \"'é' == raw && paylod.x\"\n    outcome = \"ack\"\n  }\n}\n")
	_, diags := Load([]string{dir}, Options{})
	if len(diags) != 1 {
		t.Fatalf("diags: %v", diags)
	}
	s := diags[0].Subject
	if s.Start.Line != 5 || s.Start.Column != 30 || s.End.Column != 36 {
		t.Fatalf("subject: %v", s)
	}
	src := readFile(t, filepath.Join(dir, "e.hcl"))
	if got := src[s.Start.Byte:s.End.Byte]; got != "paylod" {
		t.Fatalf("subject text %q", got)
	}
}

func TestFormat(t *testing.T) {
	in := "pipeline \"p\" {\nsource \"pipe\" {}\n  out_retry=\"r\"\n  concurrency     = 2\n}\n"
	want := "pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry   = \"r\"\n  concurrency = 2\n}\n"
	out, _, diags := Format("p.hcl", []byte(in))
	if got := string(out); got != want || diags.HasErrors() {
		t.Fatalf("Format:\n%s\nwant:\n%s\n%v", got, want, diags)
	}
	if out, _, _ := Format("p.hcl", []byte(want)); string(out) != want {
		t.Fatalf("Format is not idempotent:\n%s", out)
	}

	// A file that does not parse is not formatted: its syntax errors come back instead.
	broken := "pipeline \"p\" {\n  rule \"r {\n    outcome = \"ack\"\n  }\n}\n"
	out, file, diags := Format("b.hcl", []byte(broken))
	if out != nil || !diags.HasErrors() || file == nil || string(file.Bytes) != broken {
		t.Fatalf("Format(broken) = %q, %v", out, diags)
	}
	if s := diags[0].Subject; s == nil || s.Filename != "b.hcl" || s.Start.Line != 2 {
		t.Fatalf("diagnostic subject = %v", s)
	}
}

func TestWriteDiagnosticsWithoutFiles(t *testing.T) {
	r := hcl.Range{Filename: "x.hcl", Start: hcl.Pos{Line: 3, Column: 5, Byte: 20}, End: hcl.Pos{Line: 3, Column: 9, Byte: 24}}
	diags := hcl.Diagnostics{
		{Severity: hcl.DiagWarning, Summary: "Deprecated", Detail: "Use y.", Subject: &r},
		{Severity: hcl.DiagError, Summary: "No subject"},
	}
	var b bytes.Buffer
	WriteDiagnostics(&b, nil, diags)
	want := "x.hcl:3:5: warning: Deprecated: Use y.\n\nerror: No subject\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

// A test plugin with a typed config, to check that handler bodies are decoded by the plugin.
type hookConfig struct {
	URL     string        `hcl:"url"`
	Retries int           `hcl:"retries,optional"`
	Wait    time.Duration `hcl:"wait,optional"`
}

func init() {
	plugins.Register(plugins.Spec[hookConfig]{
		Name:     "confighook",
		Doc:      "test plugin of package config",
		Defaults: func() hookConfig { return hookConfig{Retries: 1} },
		Validate: func(c hookConfig, b plugins.Block) error {
			if c.Retries > 5 {
				return b.Errorf("", "Too many retries", "retries must be at most 5.")
			}
			return nil
		},
		Provision: func(context.Context, hookConfig, plugins.Env) (plugins.Handler, error) {
			return plugins.HandlerFunc(func(context.Context, plugins.Message, *plugins.Emitter) (plugins.Outcome, error) {
				return plugins.Ack(), nil
			}), nil
		},
	})
}

func TestHandlerConfig(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "h.hcl"), `
pipeline "p" {
  source "pipe" {}
  out_retry = "r"
  handler "confighook" {
    url  = "http://x/${env("FLOWRUN_TEST_UNSET_HOOK", "y")}"
    wait = "1m30s"
  }
}
`)
	cfg := mustLoad(t, dir)
	h := cfg.Pipelines[0].Handler
	if got, ok := h.Config.Value().(hookConfig); !ok || got != (hookConfig{URL: "http://x/y", Retries: 1, Wait: 90 * time.Second}) {
		t.Fatalf("config: %#v", h.Config.Value())
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteDiagnosticsSnippet(t *testing.T) {
	src := "pipeline \"p\" {\n\tconcurrency = \"x\"\n}\n"
	f, diags := hclparseString(t, src)
	start := strings.Index(src, `"x"`)
	r := hcl.Range{Filename: "t.hcl",
		Start: hcl.Pos{Line: 2, Column: 16, Byte: start}, End: hcl.Pos{Line: 3, Column: 2, Byte: len(src) - 1}}
	diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Bad", Subject: &r})
	var b bytes.Buffer
	WriteDiagnostics(&b, map[string]*hcl.File{"t.hcl": f}, diags)
	// The caret keeps the tab and spans the subject up to the end of its first line.
	want := "t.hcl:2:16: error: Bad\n\tconcurrency = \"x\"\n\t              ^~~\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

func hclparseString(t *testing.T, src string) (*hcl.File, hcl.Diagnostics) {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(src), "t.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return f, nil
}

func TestLoadEachFileOnce(t *testing.T) {
	// A file named both alone and through its folder is read once: no duplicate errors.
	cfg := mustLoad(t, "testdata/valid/a_payouts.hcl", "testdata/valid", "./testdata/valid/b_pipes.hcl")
	if len(cfg.Pipelines) != 7 || len(cfg.Files()) != 2 {
		t.Fatalf("got %d pipelines from %d files", len(cfg.Pipelines), len(cfg.Files()))
	}
}

func TestEmitRedisDefaultsToSource(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "r.hcl"), `
redis "main" {
  url = "redis://a:1"
}
redis "cache" {
  cluster = ["b:1", "c:1"]
}
redis "sent" {
  sentinel {
    master   = "m"
    addrs    = ["x:26379"]
    password = "p"
  }
  tls {
    cert_file            = "/etc/c.pem"
    key_file             = "k.pem"
    insecure_skip_verify = true
  }
}
pipeline "p" {
  source "stream" {
    redis  = "cache"
    stream = "s"
  }
  rule "r" {
    outcome = "ack"
    emit "list" {
      key = "same"
    }
    emit "pubsub" {
      redis = "main"
      key   = "other"
    }
  }
}
`)
	cfg := mustLoad(t, dir)
	emits := cfg.Pipelines[0].Rules.Rules[0].Emits
	if emits[0].Target.Redis != "cache" || emits[1].Target.Redis != "main" {
		t.Fatalf("targets: %+v %+v", emits[0].Target, emits[1].Target)
	}
	sent := cfg.RedisBlock("sent")
	if !reflect.DeepEqual(sent.Sentinel, &Sentinel{Master: "m", Addrs: []string{"x:26379"}, Password: "p"}) ||
		!reflect.DeepEqual(sent.TLS, &TLS{CertFile: "/etc/c.pem", KeyFile: filepath.Join(dir, "k.pem"), InsecureSkipVerify: true}) {
		t.Fatalf("sentinel: %+v %+v", sent.Sentinel, sent.TLS)
	}
	if got := cfg.RedisBlock("cache").Cluster; !reflect.DeepEqual(got, []string{"b:1", "c:1"}) {
		t.Fatalf("cluster: %q", got)
	}
}

func TestMaxHeld(t *testing.T) {
	for src, want := range map[string]int{
		"pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n":                  DefaultMaxHeld,
		"pipeline \"p\" {\n  source \"pipe\" {}\n  out_retry = \"r\"\n  max_held = 25\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n": 25,
	} {
		path := filepath.Join(t.TempDir(), "p.hcl")
		write(t, path, src)
		cfg, diags := Load([]string{path}, Options{Hostname: "h"})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		if got := cfg.Pipelines[0].MaxHeld; got != want {
			t.Errorf("MaxHeld = %d, want %d", got, want)
		}
	}
}

// file() reads regular files only: a device would exhaust memory or hang validate.
func TestFileFuncRefusesDevices(t *testing.T) {
	for _, dev := range []string{"/dev/zero", "/dev/null", "/"} {
		f, err := readRegularFile(dev)
		if err == nil {
			t.Errorf("readRegularFile(%s) = %d bytes, want an error", dev, len(f))
		}
	}
}

// A test of a pipeline with the http or exec handler carries the mock its handler decoded; its
// expect block may leave retry_after's delay open and bound it.
func TestMockedTests(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "t.hcl"), `
pipeline "hook" {
  source "pipe" {}
  out_retry = "again"
  handler "http" { url = "https://hooks.example.com/p" }
}
pipeline "charge" {
  source "pipe" {}
  out_retry = "again"
  handler "exec" { command = ["./charge"] }
}
test "busy" {
  pipeline = "hook"
  mock {
    status  = 503
    headers = { "Retry-After" = env("FLOWRUN_TEST_UNSET", "7") }
  }
  expect {
    outcome   = "retry_after"
    min_delay = "5s"
    max_delay = "10s"
  }
}
test "declined" {
  pipeline = "charge"
  mock {
    exit   = 2
    stderr = "card declined"
  }
  expect {
    outcome = "dead_letter"
    reason  = "card declined"
  }
}
test "no bounds" {
  pipeline = "hook"
  mock {}
  expect { outcome = "retry_after" }
}
`)
	cfg, diags := Load([]string{dir}, Options{Hostname: "h"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for i, want := range []struct {
		mock   string
		expect TestExpect
	}{
		{"status 503", TestExpect{Outcome: "retry_after", Want: engine.RetryAfter(0), AnyDelay: true,
			MinDelay: 5 * time.Second, MaxDelay: 10 * time.Second, HasMaxDelay: true}},
		{"exit 2", TestExpect{Outcome: "dead_letter", Want: engine.DeadLetter(""), Reason: "card declined"}},
		{"status 200", TestExpect{Outcome: "retry_after", Want: engine.RetryAfter(0), AnyDelay: true}},
	} {
		got := cfg.Tests[i]
		if got.Mock == nil || got.Mock.String() != want.mock {
			t.Errorf("test %q: mock %v, want %s", got.Name, got.Mock, want.mock)
		}
		e := got.Expect
		e.outcomeRange = hcl.Range{}
		if !reflect.DeepEqual(e, want.expect) {
			t.Errorf("test %q: expect\n got %+v\nwant %+v", got.Name, e, want.expect)
		}
	}
}

// TestForwardHeaders: forward_headers takes a bool (default false, "true" converts as HCL does),
// and the rule's emit spec carries it (SPEC §7).
func TestForwardHeaders(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "f.hcl"), `
redis "r" {
  url = "redis://h:1"
}
pipeline "p" {
  source "stream" {
    stream = "in"
  }
  rule "r" {
    outcome = "ack"
    emit "stream" {
      key             = "a"
      forward_headers = true
      headers         = { trace = "headers['trace'] ?? nil" }
    }
    emit "list" {
      key = "b"
    }
    emit "record" {
      key             = "c"
      forward_headers = "true"
    }
    emit "pubsub" {
      key             = "d"
      forward_headers = false
    }
  }
}
`)
	cfg, diags := Load([]string{dir}, Options{Hostname: "h"})
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	var got []bool
	for _, e := range cfg.Pipelines[0].Rules.Rules[0].Emits {
		got = append(got, e.ForwardHeaders)
	}
	if want := []bool{true, false, true, false}; !slices.Equal(got, want) {
		t.Errorf("forward_headers = %v, want %v", got, want)
	}
}
