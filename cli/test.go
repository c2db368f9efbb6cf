package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
)

// cmdTest runs the test blocks of the files against their pipelines' rules or Go handlers, with
// no connection to anything: a test's mock stands in for what an http or exec handler calls
// (SPEC §9).
func cmdTest(ctx context.Context, args []string, stdio Stdio) int {
	fs := newFlagSet("test", stdio)
	paths, err := parseArgs(fs, args)
	if err != nil {
		return flagExit(err)
	}
	cfg := load(paths, config.Options{}, stdio)
	if cfg == nil {
		return ExitConfig
	}
	passed, failed := 0, 0
	for _, t := range cfg.Tests {
		problems := runTest(ctx, cfg, t)
		if len(problems) == 0 {
			passed++
			fmt.Fprintf(stdio.Out, "PASS %s\n", t.Name)
			continue
		}
		failed++
		r := t.ExpectRange
		fmt.Fprintf(stdio.Out, "FAIL %s\n", t.Name)
		for _, p := range problems {
			fmt.Fprintf(stdio.Out, "  %s:%d:%d: %s\n", r.Filename, r.Start.Line, r.Start.Column, p)
		}
	}
	fmt.Fprintf(stdio.Out, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return ExitConfig
	}
	return ExitOK
}

// runTest returns what differed between the test's expectation and what the pipeline's rules or
// Go handler decided.
func runTest(ctx context.Context, cfg *config.Config, t *config.Test) []string {
	p := cfg.Pipeline(t.Pipeline)
	d := testDelivery(t.Message)
	var problems []string
	var res engine.Result
	var by string // who decided, for a wrong outcome
	if p.Handler != nil {
		var err error
		if res, err = runHandler(ctx, cfg, p, t.Mock, d); err != nil {
			return []string{err.Error()}
		}
		by = fmt.Sprintf("handler %q", p.Handler.Name)
		if t.Mock != nil {
			by += ", mock " + t.Mock.String()
		}
		if res.Err != nil {
			// A handler's error is how it asks for a retry with a reason (a timeout, a lost
			// connection): it fails the test only when the outcome is not the one expected.
			by += "; error: " + res.Err.Error()
		}
	} else {
		var rule string
		res, rule = p.Rules.Evaluate(d)
		if res.Err != nil {
			problems = append(problems, fmt.Sprintf("evaluation failed: %v", res.Err))
		}
		by = "no rule matched"
		if rule != "" {
			by = fmt.Sprintf("rule %q", rule)
		}
	}
	if !t.Expect.Matches(res.Outcome) {
		problems = append(problems, fmt.Sprintf("outcome: got %s (%s), want %s", res.Outcome, by, t.Expect.String()))
	}
	if t.Expect.HasEmits {
		problems = append(problems, compareEmits(res.Emits, t.Expect.Emits)...)
	}
	for _, k := range t.Expect.Keys {
		got, err := k.Key.FlowKey(testDelivery(t.Message))
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: the key expression failed: %v", k.Attr, err))
		case got != k.Want:
			problems = append(problems, fmt.Sprintf("%s: got %q, want %q", k.Attr, got, k.Want))
		}
	}
	return problems
}

// testDelivery is a test's message as a source would deliver it.
func testDelivery(m config.TestMessage) *engine.Delivery {
	headers := make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		headers[k] = v
	}
	attempt := max(m.Attempt, 1)
	if attempt > 1 {
		headers[engine.HeaderRetryCount] = strconv.Itoa(attempt - 1)
	}
	return &engine.Delivery{
		Message: engine.Message{Key: m.Key, Headers: headers, Payload: m.Payload},
		Attempt: attempt,
	}
}

// runHandler builds the pipeline's Go handler as `run` does, with the mock (if any) in place of
// the server or the process it calls, hands it the delivery and closes it. It does not start the
// handler: a test connects nowhere. A panic in the handler is an error, as is a failed build.
func runHandler(ctx context.Context, cfg *config.Config, p *config.Pipeline, mock handlers.Mock, d *engine.Delivery) (res engine.Result, err error) {
	hc := p.Handler
	redisName := p.Source.Redis
	if redisName == "" && len(cfg.Redis) == 1 {
		redisName = cfg.Redis[0].Name
	}
	h, err := hc.Config.Provision(ctx, handlers.Env{Pipeline: p.Name, Logger: zerolog.Nop(), Redis: redisName, Mock: mock})
	if err != nil {
		return res, fmt.Errorf("handler %q: provision: %v", hc.Name, err)
	}
	defer func() {
		if cerr := h.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("handler %q: close: %v", hc.Name, cerr)
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler %q panicked: %v", hc.Name, r)
		}
	}()
	return h.Handle(ctx, d), nil
}

func compareEmits(got []engine.Emit, want []config.TestEmit) []string {
	var problems []string
	if len(got) != len(want) {
		problems = append(problems, fmt.Sprintf("emits: got %d, want %d", len(got), len(want)))
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		g, w := got[i], want[i]
		if g.Target.Kind != w.Kind || g.Message.Key != w.Key {
			problems = append(problems, fmt.Sprintf("emit %d: got %s %q, want %s %q", i+1, g.Target.Kind, g.Message.Key, w.Kind, w.Key))
		}
		if w.HasPayload && !samePayload(g.Message.Payload, []byte(w.Payload)) {
			problems = append(problems, fmt.Sprintf("emit %d payload: got %s, want %s", i+1, g.Message.Payload, w.Payload))
		}
	}
	return problems
}

// samePayload compares JSON payloads as JSON values, anything else byte for byte.
func samePayload(got, want []byte) bool {
	var g, w any
	if json.Unmarshal(got, &g) == nil && json.Unmarshal(want, &w) == nil {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		return bytes.Equal(gb, wb)
	}
	return strings.TrimSpace(string(got)) == strings.TrimSpace(string(want))
}
