package plugins

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/engine"
)

// rangeConfig records the Block it was validated with.
type rangeConfig struct {
	Wait  string `hcl:"wait,optional"`
	Inner *struct {
		Path string `hcl:"path"`
	} `hcl:"inner,block"`

	block Block
	wait  time.Duration
}

func (c *rangeConfig) ValidateBlock(b Block) hcl.Diagnostics {
	c.block = b
	var diags hcl.Diagnostics
	d, diag := b.Duration("wait", c.Wait)
	if diag != nil {
		diags = append(diags, diag)
	}
	c.wait = d
	if inner, ok := b.Child("inner"); ok && c.Inner.Path == "bad" {
		diags = append(diags, inner.Error("path", "Bad path", "no."))
	}
	return diags
}

// blockOnly implements both interfaces: only ValidateBlock may run.
type blockOnly struct{ called []string }

func (c *blockOnly) ValidateBlock(Block) hcl.Diagnostics {
	c.called = append(c.called, "block")
	return nil
}
func (c *blockOnly) Validate(hcl.Range) hcl.Diagnostics {
	c.called = append(c.called, "range")
	return nil
}

func init() {
	nop := func(context.Context, any, Env) (engine.Handler, error) { return nil, nil }
	Register(Plugin{Name: "test-ranges", Config: func() any { return &rangeConfig{Wait: "1s"} }, New: nop})
	Register(Plugin{Name: "test-both", Config: func() any { return &blockOnly{} }, New: nop})
}

func TestDecodeBlockValidator(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		diags []string
		wait  time.Duration
	}{
		{name: "defaults", src: `handler "test-ranges" {}`, wait: time.Second},
		{name: "set", src: "handler \"test-ranges\" {\n  wait = \"250ms\"\n}", wait: 250 * time.Millisecond},
		{
			name:  "bad duration at its value",
			src:   "handler \"test-ranges\" {\n  wait = \"soon\"\n}",
			diags: []string{`dir/h.hcl:2:10: Invalid duration: "soon" is not a duration: invalid duration "soon". Write a Go duration such as "250ms", "30s" or "1h".`},
		},
		{
			name:  "zero duration",
			src:   "handler \"test-ranges\" {\n  wait = \"0s\"\n}",
			diags: []string{`dir/h.hcl:2:10: Invalid value: "wait" must be greater than zero.`},
		},
		{
			name:  "nested block attribute",
			src:   "handler \"test-ranges\" {\n  inner {\n    path = \"bad\"\n  }\n}",
			diags: []string{`dir/h.hcl:3:12: Bad path: no.`},
			wait:  time.Second,
		},
		{
			// A type error stops before validation: no follow-on noise.
			name:  "type error",
			src:   "handler \"test-ranges\" {\n  wait = [1]\n}",
			diags: []string{`dir/h.hcl:2:10: Unsuitable value type: Unsuitable value: string required, but have tuple`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, cfg, diags := decodeHandler(t, "dir/h.hcl", tt.src)
			if got := formatDiags(diags); !slices.Equal(got, tt.diags) {
				t.Fatalf("diagnostics:\n got %q\nwant %q", got, tt.diags)
			}
			if c := cfg.(*rangeConfig); !diags.HasErrors() && c.wait != tt.wait {
				t.Errorf("wait = %s, want %s", c.wait, tt.wait)
			}
		})
	}
}

func TestBlockHelpers(t *testing.T) {
	_, cfg, diags := decodeHandler(t, "conf/h.hcl", "handler \"test-ranges\" {\n  wait = \"2s\"\n}")
	if diags.HasErrors() {
		t.Fatal(formatDiags(diags))
	}
	b := cfg.(*rangeConfig).block
	if r := b.Range("wait"); r.Start.Line != 2 || r.Start.Column != 10 {
		t.Errorf("Range(wait) = %s, want the value at 2:10", r)
	}
	if r := b.Range("absent"); *r != b.DefRange || r.Start.Line != 1 {
		t.Errorf("Range(absent) = %s, want the header %s", r, b.DefRange)
	}
	if _, ok := b.Child("inner"); ok {
		t.Error("Child(inner) found a block that was not written")
	}
	abs, _ := filepath.Abs("conf")
	for in, want := range map[string]string{"ca.pem": filepath.Join(abs, "ca.pem"), "/etc/x/../ca.pem": "/etc/ca.pem"} {
		if got := b.Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDecodeCallsOnlyValidateBlock(t *testing.T) {
	_, cfg, diags := decodeHandler(t, "h.hcl", `handler "test-both" {}`)
	if diags.HasErrors() {
		t.Fatal(formatDiags(diags))
	}
	if got := cfg.(*blockOnly).called; !slices.Equal(got, []string{"block"}) {
		t.Fatalf("called %q, want only ValidateBlock", got)
	}
}

type lifecycle struct {
	engine.HandlerFunc
	started, closed int
	err             error
}

func (l *lifecycle) Start(context.Context) error { l.started++; return l.err }
func (l *lifecycle) Close() error                { l.closed++; return l.err }

func TestStartClose(t *testing.T) {
	boom := errors.New("boom")
	l := &lifecycle{err: boom}
	if err := Start(context.Background(), l); !errors.Is(err, boom) || l.started != 1 {
		t.Errorf("Start: err %v, started %d", err, l.started)
	}
	if err := Close(l); !errors.Is(err, boom) || l.closed != 1 {
		t.Errorf("Close: err %v, closed %d", err, l.closed)
	}
	// Handlers without the hooks are fine.
	plain := engine.HandlerFunc(func(context.Context, *engine.Delivery) engine.Result { return engine.Result{} })
	if err := Start(context.Background(), plain); err != nil {
		t.Errorf("Start(plain) = %v", err)
	}
	if err := Close(plain); err != nil {
		t.Errorf("Close(plain) = %v", err)
	}
}

func TestBuiltinsRegistered(t *testing.T) {
	names := Names()
	for _, want := range []string{"exec", "http", "log"} {
		if !slices.Contains(names, want) {
			t.Errorf("%q not registered: %q", want, names)
		}
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
