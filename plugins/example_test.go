package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/plugins"
)

// greetConfig is the body of `handler "greet" {}`.
type greetConfig struct {
	Greeting string `hcl:"greeting"`       // required
	Later    string `hcl:"later,optional"` // a duration, default "1m"

	later time.Duration // parsed by ValidateBlock
}

// ValidateBlock checks what types cannot, pointing at the attribute.
func (c *greetConfig) ValidateBlock(b plugins.Block) hcl.Diagnostics {
	var diags hcl.Diagnostics
	var d *hcl.Diagnostic
	if c.later, d = b.Duration("later", c.Later); d != nil {
		diags = append(diags, d)
	}
	if c.Greeting == "" {
		diags = append(diags, b.Error("greeting", "Invalid value", `"greeting" must not be empty.`))
	}
	return diags
}

type greeter struct {
	cfg *greetConfig
	log zerolog.Logger
}

func (g *greeter) Handle(ctx context.Context, d *engine.Delivery) engine.Result {
	var p struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(d.Payload, &p); err != nil || p.Name == "" {
		// It can never succeed: straight to the dead letter, saying why.
		return engine.Result{Outcome: engine.DeadLetter("greet: the payload needs a name")}
	}
	if d.Headers["mood"] == "grumpy" {
		return engine.Result{Outcome: engine.RetryAfter(g.cfg.later)}
	}
	return engine.Result{
		Outcome: engine.Ack(),
		Emits: []engine.Emit{{
			Target:  engine.Target{Kind: "record"},
			Message: &engine.Message{Key: "greetings", Headers: map[string]string{}, Payload: []byte(g.cfg.Greeting + ", " + p.Name)},
		}},
	}
}

// handlerBlock finds the `handler "NAME" {}` block of an HCL file, as flowrun's loader does.
func handlerBlock(filename, src string) (*hcl.Block, hcl.Diagnostics) {
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), filename)
	if diags.HasErrors() {
		return nil, diags
	}
	content, diags := f.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "handler", LabelNames: []string{"name"}}}})
	if diags.HasErrors() {
		return nil, diags
	}
	return content.Blocks[0], nil
}

// A handler registers by name, decodes its own block, is built and handles deliveries.
func Example_handler() {
	plugins.Register(plugins.Plugin{
		Name:   "greet",
		Doc:    "greets whoever a message names",
		Config: func() any { return &greetConfig{Later: "1m"} },
		New: func(_ context.Context, cfg any, env plugins.Env) (engine.Handler, error) {
			return &greeter{cfg: cfg.(*greetConfig), log: env.Logger}, nil
		},
	})

	block, _ := handlerBlock("greet.hcl", `
handler "greet" {
  greeting = "Hello"
  later    = "5s"
}
`)
	p, _ := plugins.Lookup(block.Labels[0])
	cfg, diags := p.Decode(block.Body, nil, block.DefRange)
	if diags.HasErrors() {
		fmt.Println(diags)
		return
	}
	h, err := p.New(context.Background(), cfg, plugins.Env{Pipeline: "greetings", Logger: zerolog.Nop()})
	if err != nil {
		fmt.Println(err)
		return
	}

	for _, m := range []engine.Message{
		{Key: "people", Payload: []byte(`{"name": "Ada"}`)},
		{Key: "people", Payload: []byte(`{"name": "Bob"}`), Headers: map[string]string{"mood": "grumpy"}},
		{Key: "people", Payload: []byte(`{}`)},
	} {
		res := h.Handle(context.Background(), &engine.Delivery{Message: m, Attempt: 1})
		fmt.Println(res.Outcome)
		for _, e := range res.Emits {
			fmt.Printf("  emit %s %s: %s\n", e.Target.Kind, e.Message.Key, e.Message.Payload)
		}
	}
	// Output:
	// ack
	//   emit record greetings: Hello, Ada
	// retry_after(5s)
	// dead_letter("greet: the payload needs a name")
}

// Configuration mistakes are diagnostics with the file, line and column of the value at fault.
func Example_diagnostics() {
	block, _ := handlerBlock("pipelines/greet.hcl", `
handler "http" {
  url     = "https://hooks.example.com/greet"
  timeout = "10 seconds"
}
`)
	p, _ := plugins.Lookup("http")
	_, diags := p.Decode(block.Body, nil, block.DefRange)
	for _, d := range diags {
		fmt.Printf("%s:%d:%d: error: %s: %s\n", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, d.Summary, d.Detail)
	}
	// Output:
	// pipelines/greet.hcl:4:13: error: Invalid duration: "10 seconds" is not a duration: unknown unit " seconds" in duration "10 seconds". Write a Go duration such as "250ms", "30s" or "1h".
}

// mustBuild decodes and builds the one handler block in src.
func mustBuild(src string) engine.Handler {
	block, diags := handlerBlock("example.hcl", src)
	if diags.HasErrors() {
		panic(diags)
	}
	p, _ := plugins.Lookup(block.Labels[0])
	cfg, diags := p.Decode(block.Body, nil, block.DefRange)
	if diags.HasErrors() {
		panic(diags)
	}
	h, err := p.New(context.Background(), cfg, plugins.Env{Pipeline: "example", Logger: zerolog.Nop()})
	if err != nil {
		panic(err)
	}
	return h
}

// The http handler posts each message; the status decides the outcome.
func Example_http() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("  %s %s %s trace=%s: %s\n", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("X-Flowrun-Trace-Id"), body)
		switch r.Header.Get("X-Flowrun-Gateway") {
		case "down":
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "bad":
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"error":"amount must be positive"}`)
		}
	}))
	defer srv.Close()

	h := mustBuild(fmt.Sprintf(`
handler "http" {
  url     = "%s/payouts"
  timeout = "5s"
  headers = { Authorization = "Bearer secret" }
}
`, srv.URL))
	defer plugins.Close(h)

	for _, gateway := range []string{"up", "down", "bad"} {
		d := &engine.Delivery{Attempt: 1, Message: engine.Message{
			Key:     "payouts",
			Headers: map[string]string{"trace-id": "t-1", "gateway": gateway},
			Payload: []byte(`{"id":7,"amount":12}`),
		}}
		fmt.Println(h.Handle(context.Background(), d).Outcome)
	}
	// Output:
	//   POST /payouts application/json trace=t-1: {"id":7,"amount":12}
	// ack
	//   POST /payouts application/json trace=t-1: {"id":7,"amount":12}
	// retry_after(30s)
	//   POST /payouts application/json trace=t-1: {"id":7,"amount":12}
	// dead_letter("http 422 Unprocessable Entity: {\"error\":\"amount must be positive\"}")
}

// The exec handler runs a command per message: payload on stdin, headers in the environment,
// the exit status decides.
func Example_exec() {
	h := mustBuild(`
handler "exec" {
  command     = ["/bin/sh", "-c", <<-EOT
    read -r payload
    case "$FLOWRUN_HEADER_GATEWAY" in
      down) echo "gateway down" >&2; exit 75 ;;
      bad)  echo "card declined" >&2; exit 3 ;;
    esac
    echo "paid $payload on attempt $FLOWRUN_ATTEMPT"
  EOT
  ]
  timeout     = "5s"
  emit_stdout = "payouts.done"
}
`)
	for _, gateway := range []string{"up", "down", "bad"} {
		d := &engine.Delivery{Attempt: 2, Message: engine.Message{
			Key:     "payouts",
			Headers: map[string]string{"gateway": gateway},
			Payload: []byte("7\n"),
		}}
		res := h.Handle(context.Background(), d)
		fmt.Println(res.Outcome)
		for _, e := range res.Emits {
			fmt.Printf("  emit %s %s: %s\n", e.Target.Kind, e.Message.Key, e.Message.Payload)
		}
	}
	// Output:
	// ack
	//   emit record payouts.done: paid 7 on attempt 2
	// retry
	// dead_letter("exec: exit status 3: card declined")
}
