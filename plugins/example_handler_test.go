package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/flowrun/flowrun/plugins"
)

// GreetConfig is the body of `handler "greet" {}`: gohcl tags name the attributes, and a
// time.Duration is written as a string ("5s") and arrives parsed.
type GreetConfig struct {
	Greeting string        `hcl:"greeting"`       // required
	Later    time.Duration `hcl:"later,optional"` // default 1m
	Channel  string        `hcl:"channel,optional"`
}

func init() {
	plugins.Register(plugins.Spec[GreetConfig]{
		Name:     "greet",
		Doc:      "greets whoever a message names", // shown by `flowrun plugins`
		Defaults: func() GreetConfig { return GreetConfig{Later: time.Minute} },
		Validate: func(c GreetConfig, b plugins.Block) error {
			var errs []error
			if c.Greeting == "" {
				errs = append(errs, b.Errorf("greeting", "Invalid value", `"greeting" must not be empty.`))
			}
			if c.Later == 0 {
				errs = append(errs, b.Errorf("later", "Invalid value", `"later" must be greater than zero.`))
			}
			return errors.Join(errs...) // each at its attribute: FILE:LINE:COL
		},
		Provision: func(_ context.Context, c GreetConfig, env plugins.Env) (plugins.Handler, error) {
			return &greeter{cfg: c}, nil
		},
	})
}

type greeter struct{ cfg GreetConfig }

func (g *greeter) Handle(ctx context.Context, m plugins.Message, emit *plugins.Emitter) (plugins.Outcome, error) {
	var p struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(m.Payload(), &p); err != nil || p.Name == "" {
		// It can never succeed: straight to the dead letter, saying why.
		return plugins.DeadLetter("greet: the payload needs a name"), nil
	}
	if m.Header("mood") == "grumpy" {
		return plugins.RetryAfter(g.cfg.Later), nil
	}
	emit.Emit(plugins.ToRecord("greetings"), []byte(g.cfg.Greeting+", "+p.Name), nil)
	if g.cfg.Channel != "" {
		emit.Emit(plugins.ToChannel(g.cfg.Channel), []byte(p.Name), map[string]string{"greeted-by": "greet"})
	}
	return plugins.Ack(), nil
}

// A handler registers in init, decodes its own block, is provisioned and handles messages.
// Build and Call run it outside a pipeline, as flowrun would run it inside one.
func Example_handler() {
	h, err := plugins.Build(context.Background(), "greet.hcl", `
handler "greet" {
  greeting = "Hello"
  later    = "5s"
  channel  = "greeted"
}
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range []plugins.TestMessage{
		{Key: "people", Payload: []byte(`{"name": "Ada"}`)},
		{Key: "people", Payload: []byte(`{"name": "Bob"}`), Headers: map[string]string{"mood": "grumpy"}},
		{Key: "people", Payload: []byte(`{}`)},
	} {
		res := plugins.Call(context.Background(), h, m)
		fmt.Println(res.Outcome)
		for _, e := range res.Emits {
			fmt.Printf("  emit %s: %s %v\n", e.To, e.Payload, e.Headers)
		}
	}

	// Mistakes in the block are reported where they were written.
	fmt.Println(plugins.Check("greet.hcl", `
handler "greet" {
  greeting = ""
  later    = "soon"
}
`))
	// Output:
	// ack
	//   emit record "greetings": Hello, Ada map[]
	//   emit pubsub "greeted": Ada map[greeted-by:greet]
	// retry_after(5s)
	// dead_letter("greet: the payload needs a name")
	// greet.hcl:3:14: error: Invalid value: "greeting" must not be empty.
	// greet.hcl:4:14: error: Invalid duration: "soon" is not a duration: invalid duration "soon". Write a Go duration such as "250ms", "30s" or "1h".
}
