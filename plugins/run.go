package plugins

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// maxOutput is the most a built-in handler records as a workflow step's output: an http
// response body or an exec handler's stdout. A larger one is a dead letter (the run fails),
// never a silent cut.
const maxOutput = 1 << 20

// RunInfo is what a handler in a workflow step sees of its run (SPEC §16).
type RunInfo struct {
	ID       string // the run's id
	Workflow string // the workflow's name
	Step     string // the step this message is a visit of
	// Visit counts the run's step visits from 1. It is the same across retries of one visit,
	// as the message's x-idempotency-key header (<workflow>/<run>/<step>/<visit>) is.
	Visit     int
	StartedAt time.Time
	// Input is the run's input, the starting message's payload decoded as JSON (a string when
	// it is not JSON); Steps is each finished step's output by step name, decoded the same
	// way: map[string]any, []any, float64, string, bool or nil.
	Input any
	Steps map[string]any
}

// Run is the run of the workflow step this message is a visit of, and false outside a
// workflow. Input and Steps are copies, the handler's to change.
func (m Message) Run() (RunInfo, bool) {
	if !m.inRun() {
		return RunInfo{}, false
	}
	r := m.d.Run
	info := RunInfo{ID: r.ID, Workflow: r.Workflow, Step: r.Step, Visit: r.Visit, StartedAt: r.StartedAt,
		Input: copyJSON(r.Input)}
	if r.Steps != nil {
		info.Steps = make(map[string]any, len(r.Steps))
		for name, out := range r.Steps {
			info.Steps[name] = copyJSON(out)
		}
	}
	return info, true
}

func (m Message) inRun() bool { return m.d != nil && m.d.Run != nil }

// copyJSON deep-copies a decoded JSON value, decoding one still held as JSON text.
func copyJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = copyJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = copyJSON(e)
		}
		return out
	case json.RawMessage:
		var out any
		if json.Unmarshal(v, &out) != nil {
			return string(v)
		}
		return out
	case map[string]string:
		return maps.Clone(v)
	case []byte:
		return bytes.Clone(v)
	}
	return v
}

// Output sets what this workflow step records as its output (SPEC §16): v as encoding/json
// writes it (a json.RawMessage as it is), which later steps read as steps.STEP in expressions
// and as RunInfo.Steps. Output copies v; the last call wins; it takes effect, like Emit, only
// when Handle returns no error. A v that cannot be encoded fails the delivery (a retry, with the
// error logged). Outside a workflow (m.Run() reports false) Output does nothing, so one handler
// serves pipelines and steps alike.
func (e *Emitter) Output(v any) {
	if !e.inRun {
		return
	}
	b, err := encodeOutput(v)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		e.log.Error().Msg("Output after Handle returned: dropped; Output is valid only until Handle returns")
		return
	}
	if err != nil {
		if e.err == nil {
			e.err = fmt.Errorf("output: %w", err)
		}
		return
	}
	e.output = b
}

// encodeOutput is v's JSON text, compact, without HTML escapes (an output is data, not a page).
func encodeOutput(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// textOutput is a built-in handler's output from text it got (a response body, stdout): the
// JSON it holds when it is JSON, else the text as a string.
func textOutput(b []byte) any {
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return string(b)
}

// stdoutOutput is textOutput of a command's stdout, without the trailing line breaks of a
// string (as a shell's $(...) reads it): `echo ok` records "ok".
func stdoutOutput(b []byte) any {
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return strings.TrimRight(string(b), "\r\n")
}

// engineRun is the engine's run view of a TestMessage's Run.
func (r *RunInfo) engineRun() *engine.Run {
	return &engine.Run{ID: r.ID, Workflow: r.Workflow, Step: r.Step, Visit: max(r.Visit, 1), StartedAt: r.StartedAt,
		Input: copyJSON(r.Input), Steps: maps.Clone(r.Steps)}
}
