package redisrun

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// The run hash's fields (WF-DESIGN "Names"). Times are unix milliseconds; finished and pending
// are JSON arrays of step names; compensated is 0 or 1.
const (
	fStatus      = "status"
	fStep        = "step"
	fVisit       = "visit"
	fInput       = "input"
	fError       = "error"
	fFinished    = "finished"
	fPending     = "pending"
	fEnding      = "ending"
	fFailedStep  = "failed_step"
	fCompensated = "compensated"
	fFingerprint = "fingerprint"
	fTrace       = "trace"
	fStartedAt   = "started_at"
	fUpdatedAt   = "updated_at"
)

// Step message fields: the run and the visit it is for (plus x-retry-count on copies).
const (
	msgRun   = "run"
	msgVisit = "visit"
)

func itoa(n int) string           { return strconv.Itoa(n) }
func atoi(s string) (int, error)  { return strconv.Atoi(s) }
func msOf(t time.Time) string     { return strconv.FormatInt(t.UnixMilli(), 10) }
func timeOfMS(s string) time.Time { n, _ := strconv.ParseInt(s, 10, 64); return msTime(n) }
func msTime(n int64) time.Time    { return time.UnixMilli(n).UTC() }
func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// jsonList is l as a JSON array of strings ([] for none); written on most transitions.
func jsonList(l []string) string {
	b := make([]byte, 0, 2+8*len(l))
	b = append(b, '[')
	for i, s := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = codec.AppendJSONString(b, s)
	}
	return string(append(b, ']'))
}

// parseList reads a JSON array of strings; read on every step visit, so a list whose strings
// hold no escape is split by hand.
func parseList(s string) []string {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' || strings.IndexByte(s, '\\') >= 0 {
		var l []string
		_ = json.Unmarshal([]byte(s), &l)
		return l
	}
	body := s[1 : len(s)-1]
	if body == "" {
		return nil
	}
	parts := strings.Split(body, ",")
	l := make([]string, 0, len(parts))
	for _, p := range parts {
		if len(p) < 2 || p[0] != '"' || p[len(p)-1] != '"' || strings.IndexByte(p[1:len(p)-1], '"') >= 0 {
			var l []string // a comma inside a name, spaces: the slow way
			_ = json.Unmarshal([]byte(s), &l)
			return l
		}
		l = append(l, p[1:len(p)-1])
	}
	return l
}

// eventJSON is e as json.Marshal writes it (without its HTML escaping), by hand: a history
// event is written on every transition.
func eventJSON(e workflow.Event) any {
	b := make([]byte, 0, 96+len(e.Step)+len(e.Outcome)+len(e.Error))
	b = append(b, `{"step":`...)
	b = codec.AppendJSONString(b, e.Step)
	b = append(b, `,"visit":`...)
	b = strconv.AppendInt(b, int64(e.Visit), 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(e.Attempt), 10)
	b = append(b, `,"outcome":`...)
	b = codec.AppendJSONString(b, e.Outcome)
	b = append(b, `,"at":"`...)
	b = e.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","error":`...)
	b = codec.AppendJSONString(b, e.Error)
	return string(append(b, '}'))
}

// transitionFields are the run hash fields a transition sets: everything that moves but the
// visit, which applyScript moves itself (as workflow.State.Apply, it goes up when a step is
// entered, so the visit counts the run's step visits). The current step is the one entered,
// none once the run ended. With prev (the record as the transition was decided on) only what
// differs from it is written.
func transitionFields(t workflow.Transition, prev *workflow.State) []any {
	f := make([]any, 0, 20)
	f = append(f, fUpdatedAt, msOf(t.At))
	if t.Enter != "" || t.Done {
		f = append(f, fStep, t.Enter)
	}
	set := func(name, v string, same bool) {
		if prev == nil || !same {
			f = append(f, name, v)
		}
	}
	var p workflow.State
	if prev != nil {
		p = *prev
	}
	set(fStatus, string(t.Status), t.Status == p.Status)
	set(fError, t.Error, t.Error == p.Error)
	set(fFinished, jsonList(t.Finished), slices.Equal(t.Finished, p.Finished))
	set(fPending, jsonList(t.Pending), slices.Equal(t.Pending, p.Pending))
	set(fEnding, string(t.Ending), t.Ending == p.Ending)
	set(fFailedStep, t.FailedStep, t.FailedStep == p.FailedStep)
	set(fCompensated, boolField(t.Compensated), t.Compensated == p.Compensated)
	return f
}

// stateFields are a new run's hash fields. Those that are empty (no error, no finished step, not
// compensated ...) are left out: decodeState reads a missing field as empty, and a run waiting
// in Redis costs only what it holds.
func stateFields(st *workflow.State) []any {
	input := string(st.Input)
	if input == "" {
		input = "null"
	}
	f := make([]any, 0, 28)
	f = append(f, fStatus, string(st.Status), fStep, st.Step, fVisit, itoa(st.Visit), fInput, input,
		fStartedAt, msOf(st.StartedAt), fUpdatedAt, msOf(st.UpdatedAt))
	opt := func(name, v string, empty bool) {
		if !empty {
			f = append(f, name, v)
		}
	}
	opt(fError, st.Error, st.Error == "")
	opt(fFinished, jsonList(st.Finished), len(st.Finished) == 0)
	opt(fPending, jsonList(st.Pending), len(st.Pending) == 0)
	opt(fEnding, string(st.Ending), st.Ending == "")
	opt(fFailedStep, st.FailedStep, st.FailedStep == "")
	opt(fCompensated, "1", !st.Compensated)
	opt(fFingerprint, st.Fingerprint, st.Fingerprint == "")
	opt(fTrace, st.TraceParent, st.TraceParent == "")
	return f
}

// decodeState reads a run hash (and its outputs, nil when not loaded); nil when the hash is empty.
func decodeState(workflowName, id string, h, out map[string]string) (*workflow.State, error) {
	if len(h) == 0 {
		return nil, nil
	}
	return newState(workflowName, id, func(f string) string { return h[f] }, out)
}

// loadArgs is a step's load of a run hash: HGETALL, the whole record (every field newState
// reads, the input among them since it is the step's payload when the step sets none, and so
// what a dead letter carries). Redis answers it in one pass over the hash, where HMGET of the
// same fields costs a lookup per field, missing ones included, and twice the arguments.
func loadArgs(key string) []any { return []any{"hgetall", key} }

// decodeLoaded reads the reply of loadArgs, a flat array of field, value (RESP2) or a map
// (RESP3), and the outputs (nil when not loaded); nil when the run hash does not exist.
func decodeLoaded(workflowName, id string, reply any, out map[string]string) (*workflow.State, error) {
	var h map[string]string
	switch r := reply.(type) {
	case []any:
		if len(r) == 0 {
			return nil, nil
		}
		h = make(map[string]string, len(r)/2)
		for i := 0; i+1 < len(r); i += 2 {
			k, _ := r[i].(string)
			v, _ := r[i+1].(string)
			h[k] = v
		}
	case map[any]any:
		h = make(map[string]string, len(r))
		for k, v := range r {
			ks, _ := k.(string)
			vs, _ := v.(string)
			h[ks] = vs
		}
	case nil:
	default:
		return nil, fmt.Errorf("run %s: unexpected reply %T", id, reply)
	}
	return decodeState(workflowName, id, h, out)
}

// newState is a run as its hash's fields (get) and outputs say.
func newState(workflowName, id string, get func(field string) string, out map[string]string) (*workflow.State, error) {
	visit, err := atoi(get(fVisit))
	if err != nil {
		return nil, fmt.Errorf("run %s: visit %q: %w", id, get(fVisit), err)
	}
	st := &workflow.State{
		ID:          id,
		Workflow:    workflowName,
		Status:      workflow.Status(get(fStatus)),
		Step:        get(fStep),
		Visit:       visit,
		Input:       json.RawMessage(get(fInput)),
		Error:       get(fError),
		Finished:    parseList(get(fFinished)),
		Pending:     parseList(get(fPending)),
		Ending:      workflow.Status(get(fEnding)),
		FailedStep:  get(fFailedStep),
		Compensated: get(fCompensated) == "1",
		Fingerprint: get(fFingerprint),
		TraceParent: get(fTrace),
		StartedAt:   timeOfMS(get(fStartedAt)),
		UpdatedAt:   timeOfMS(get(fUpdatedAt)),
	}
	if len(st.Input) == 0 {
		st.Input = json.RawMessage("null")
	}
	if out != nil {
		st.Steps = make(map[string]json.RawMessage, len(out))
		for k, v := range out {
			st.Steps[k] = json.RawMessage(v)
		}
	}
	return st, nil
}

// delayedMember is a delayed step message: {"step":"S","f":[XADD fields]}, raw JSON (as
// redisstream's delay members) so the move script's cjson passes every byte through. The fields
// hold the run and visit (and x-retry-count on a retry's copy), so a member is unique.
func delayedMember(step string, fields []string) string {
	b := make([]byte, 0, 32+len(step)+16*len(fields))
	b = append(b, `{"step":`...)
	b = codec.AppendRawJSONString(b, step)
	b = append(b, `,"f":[`...)
	for i, f := range fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = codec.AppendRawJSONString(b, f)
	}
	return string(append(b, "]}"...))
}

// stepFields are the fields of a step message entering visit of run; trace, when set, is the
// run's trace context (its record's): the message carries the run span's traceparent (SPEC §14:
// each step visit's span is a child of the run's). applyScript writes the first four itself
// ("run", id, "visit", the visit) and takes the rest as arguments: keep them first.
func stepFields(run string, visit int, trace string) []string {
	f := []string{msgRun, run, msgVisit, itoa(visit)}
	if tp := engine.RunTraceparent(trace); tp != "" {
		f = append(f, engine.HeaderTraceparent, tp)
	}
	return f
}
