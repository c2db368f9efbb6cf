package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
)

// cmdTest runs the test blocks of the files against their pipelines' rules, with no connection
// to anything (SPEC §9).
func cmdTest(args []string, stdio Stdio) int {
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
		problems := runTest(cfg, t)
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

// runTest returns what differed between the test's expectation and what the rules decided.
func runTest(cfg *config.Config, t *config.Test) []string {
	p := cfg.Pipeline(t.Pipeline)
	headers := make(map[string]string, len(t.Message.Headers))
	for k, v := range t.Message.Headers {
		headers[k] = v
	}
	attempt := max(t.Message.Attempt, 1)
	if attempt > 1 {
		headers[engine.HeaderRetryCount] = strconv.Itoa(attempt - 1)
	}
	d := &engine.Delivery{
		Message: engine.Message{Key: t.Message.Key, Headers: headers, Payload: t.Message.Payload},
		Attempt: attempt,
	}
	res, rule := p.Rules.Evaluate(d)
	var problems []string
	if res.Err != nil {
		problems = append(problems, fmt.Sprintf("evaluation failed: %v", res.Err))
	}
	if !sameOutcome(res.Outcome, t.Expect.Want) {
		by := "no rule matched"
		if rule != "" {
			by = fmt.Sprintf("rule %q", rule)
		}
		problems = append(problems, fmt.Sprintf("outcome: got %s (%s), want %s", res.Outcome, by, t.Expect.Outcome))
	}
	if t.Expect.HasEmits {
		problems = append(problems, compareEmits(res.Emits, t.Expect.Emits)...)
	}
	return problems
}

func sameOutcome(got, want engine.Outcome) bool {
	if got.Kind != want.Kind {
		return false
	}
	// A retry_after computed with backoff() is random; only a fixed expectation is compared.
	return got.Kind != engine.KindRetryAfter || want.Delay == 0 || got.Delay == want.Delay
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
