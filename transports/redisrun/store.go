package redisrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/workflow"
)

// DefaultRetention is how long a finished run is kept when the graph says nothing (SPEC §16).
const DefaultRetention = 7 * 24 * time.Hour

// applyOp is one call of applyScript: a transition, and what settles with it.
type applyOp struct {
	create *workflow.State // mode "c": the new run
	resume bool            // mode "r": t may apply to an ended run (a retry)
	// prev is the run as t was decided on, when known (a step's settlement): only the fields
	// that differ from it are written. The script's visit check makes that safe: while the
	// visit is t.Visit and the run active, no transition has changed the record since.
	prev      *workflow.State
	t         workflow.Transition
	ackStream string   // the delivery's step stream ("" none)
	ackID     string   // the delivery's entry id
	dead      []string // the dead letter's XADD fields (nil none)
	deadKey   string
	retrace   string // a retry's new trace context (engine.RunRetrace), "" none
}

// trace is the run's trace context (its record's), where the run is known.
func (op applyOp) trace() string {
	switch {
	case op.retrace != "":
		return op.retrace
	case op.create != nil:
		return op.create.TraceParent
	case op.prev != nil:
		return op.prev.TraceParent
	}
	return ""
}

func (s *Store) retention() time.Duration {
	if s.g.Retention > 0 {
		return s.g.Retention
	}
	return DefaultRetention
}

// Arguments of applyScript that are the same on every call, boxed once: call runs on every
// transition and boxing a string allocates.
var (
	argA, argC, argR any = "a", "c", "r"
	argEmpty         any = ""
	argNull          any = "null"
)

// applyScript's parts (see there), in their order: a call's letters name those it carries.
const partLetters = "saodeltux"

const (
	partCreate = 1 << iota
	partAck
	partOldTimer
	partDead
	partEnter
	partDelayed
	partTimeout
	partOutput
	partDone
)

// partArgs are the letters of every set of parts, boxed once.
var partArgs = func() (out [1 << len(partLetters)]any) {
	for m := range out {
		var b []byte
		for i := range len(partLetters) {
			if m&(1<<i) != 0 {
				b = append(b, partLetters[i])
			}
		}
		out[m] = string(b)
	}
	return out
}()

// strArg boxes s, without an allocation when it is empty.
func strArg(s string) any {
	if s == "" {
		return argEmpty
	}
	return s
}

// call lays op out for applyScript (see there): the run's four keys and its mode, id and visit,
// then only the parts op has.
func (s *Store) call(op applyOp) (keys []string, args []any) {
	t := op.t
	run := s.k.run(t.Run)
	keys = make([]string, 4, 8)
	keys[0], keys[1], keys[2], keys[3] = run, s.k.out(t.Run), s.k.hist(t.Run), s.fixed.active
	args = make([]any, 4, 24+len(op.dead))
	args[0], args[1], args[2] = argA, t.Run, itoa(t.Visit)
	parts := 0
	oldTimer := op.create == nil
	if op.prev != nil {
		if def := s.g.Step(op.prev.Step); def != nil && def.Timeout == 0 {
			oldTimer = false // entering the step registered no timeout
		}
	}
	switch {
	case op.create != nil:
		args[0], parts = argC, partCreate
		args = append(args, msOf(op.create.StartedAt))
		keys = append(keys, s.fixed.runs)
	case op.resume:
		args[0] = argR
	}
	if op.ackID != "" {
		parts |= partAck
		args = append(args, s.fixed.group, op.ackID)
		keys = append(keys, op.ackStream)
	}
	if oldTimer {
		parts |= partOldTimer
		args = append(args, timerMember(t.Run, t.Visit))
		keys = append(keys, s.fixed.timeouts)
	}
	if len(op.dead) > 0 {
		parts |= partDead
		args = append(args, len(op.dead))
		for _, f := range op.dead {
			args = append(args, f)
		}
		keys = append(keys, op.deadKey)
	}
	if t.Enter != "" {
		parts |= partEnter
		args = append(args, s.nameArg(t.Enter))
		fields := stepFields(t.Run, t.Visit+1, op.trace())
		if t.EnterDelay > 0 {
			parts |= partDelayed
			args = append(args, delayedMember(t.Enter, fields), msOf(t.At.Add(t.EnterDelay)))
			keys = append(keys, s.fixed.delayed)
		} else {
			// The script writes "run", id, "visit", visit + 1 itself: the rest follows.
			extra := fields[4:]
			args = append(args, len(extra))
			for _, f := range extra {
				args = append(args, f)
			}
			keys = append(keys, s.stepKey(t.Enter))
		}
		if !t.EnterDeadline.IsZero() {
			parts |= partTimeout
			args = append(args, timerMember(t.Run, t.Visit+1), msOf(t.EnterDeadline))
			keys = append(keys, s.fixed.timeouts)
		}
	}
	if t.HasOutput {
		parts |= partOutput
		var out any = argNull
		if len(t.Output) > 0 {
			out = string(t.Output)
		}
		args = append(args, s.nameArg(t.Step), out)
	}
	if t.Done {
		parts |= partDone
		args = append(args, s.fixed.retention)
	}
	args[3] = partArgs[parts]
	var hash []any
	if op.create != nil {
		hash = stateFields(op.create)
	} else {
		hash = transitionFields(t, op.prev)
	}
	if op.retrace != "" {
		hash = append(hash, fTrace, op.retrace)
	}
	args = append(args, len(hash))
	args = append(args, hash...)
	for _, e := range t.History {
		args = append(args, eventJSON(e))
	}
	return keys, args
}

// fixedArgs are a store's keys and arguments that never change, made once.
type fixedArgs struct {
	runs, active, timeouts, delayed string
	group, retention                any
	steps                           map[string]string // each step's stream
	names                           map[string]any    // each step's name, boxed
}

func (s *Store) initFixed() {
	s.fixed = fixedArgs{
		runs: s.k.runs(), active: s.k.active(), timeouts: s.k.timeouts(), delayed: s.k.delayed(),
		group: s.g.Name, retention: strconv.FormatInt(s.retention().Milliseconds(), 10),
		steps: make(map[string]string, len(s.g.Steps)), names: make(map[string]any, len(s.g.Steps)),
	}
	for _, d := range s.g.Steps {
		s.fixed.steps[d.Name] = s.k.step(d.Name)
		s.fixed.names[d.Name] = d.Name
	}
}

// nameArg is a step's name as an argument ("" none).
func (s *Store) nameArg(step string) any {
	if v, ok := s.fixed.names[step]; ok {
		return v
	}
	return strArg(step)
}

// stepKey is a step's stream.
func (s *Store) stepKey(step string) string {
	if k, ok := s.fixed.steps[step]; ok {
		return k
	}
	return s.k.step(step)
}

// result reads applyScript's reply: applied, and the run's start when it was.
func result(v any) (bool, time.Time, error) {
	if n, ok := v.(int64); ok {
		return n == 1, time.Time{}, nil
	}
	r, ok := v.([]any)
	if !ok || len(r) == 0 {
		return false, time.Time{}, fmt.Errorf("redisrun: unexpected script reply %v", v)
	}
	n, _ := r[0].(int64)
	if n != 1 {
		return false, time.Time{}, nil
	}
	var started time.Time
	if len(r) > 1 {
		if s, ok := r[1].(string); ok {
			started = timeOfMS(s)
		}
	}
	return true, started, nil
}

// done tells OnDone (and the tracer) of a run this process ended; trace is its trace context.
func (s *Store) done(t workflow.Transition, started time.Time, trace string) {
	if t.Done {
		s.endRun(t, started, trace)
	}
	if t.Done && s.OnDone != nil {
		took := t.At.Sub(started)
		if started.IsZero() || took < 0 {
			took = 0
		}
		s.OnDone(t.Status, took)
	}
}

// exec applies op alone (Apply, a timeout, a cancel, a retry).
func (s *Store) exec(ctx context.Context, op applyOp) (bool, error) {
	keys, args := s.call(op)
	v, err := applyScript.Run(ctx, s.c, keys, args...).Result()
	if err != nil {
		return false, fmt.Errorf("redisrun: %s run %s: %w", s.g.Name, op.t.Run, err)
	}
	ok, started, err := result(v)
	if err != nil {
		return false, err
	}
	if ok {
		s.done(op.t, started, op.trace())
	}
	return ok, nil
}

// Apply applies t; false when the run's visit is no longer t.Visit (nothing changed).
func (s *Store) Apply(ctx context.Context, t workflow.Transition) (bool, error) {
	return s.exec(ctx, applyOp{t: t})
}

// Get reads a run: its record, outputs and history; workflow.ErrNoRun when there is none.
func (s *Store) Get(ctx context.Context, id string) (*workflow.State, error) {
	pipe := s.c.Pipeline()
	h := pipe.HGetAll(ctx, s.k.run(id))
	out := pipe.HGetAll(ctx, s.k.out(id))
	hist := pipe.LRange(ctx, s.k.hist(id), 0, -1)
	if err := redisconn.ExecPipe(ctx, pipe); err != nil {
		return nil, fmt.Errorf("redisrun: read run %s: %w", id, err)
	}
	for _, c := range []redis.Cmder{h, out, hist} {
		if err := c.Err(); err != nil {
			return nil, fmt.Errorf("redisrun: read run %s: %w", id, err)
		}
	}
	st, err := decodeState(s.g.Name, id, h.Val(), out.Val())
	if err != nil {
		return nil, fmt.Errorf("redisrun: %w", err)
	}
	if st == nil {
		return nil, workflow.ErrNoRun
	}
	for _, e := range hist.Val() {
		var ev workflow.Event
		if json.Unmarshal([]byte(e), &ev) == nil {
			st.History = append(st.History, ev)
		}
	}
	return st, nil
}

// listPage is how many runs one round trip of List and Counts reads.
const listPage = 200

// List reads runs newest first (by start), of one status when status is not "", at most limit
// (<= 0: all). Their input, outputs and history are not loaded; runs whose record expired are
// skipped.
func (s *Store) List(ctx context.Context, status workflow.Status, limit int) ([]*workflow.State, error) {
	var out []*workflow.State
	err := s.scan(ctx, listFields, func(id string, h map[string]string) (bool, error) {
		st, err := decodeState(s.g.Name, id, h, nil)
		if err != nil || (status != "" && st.Status != status) {
			return true, err
		}
		out = append(out, st)
		return limit <= 0 || len(out) < limit, nil
	})
	return out, err
}

// listFields are what List reads of each run: all but its input, which a list never shows and
// which may be the largest field.
var listFields = []string{fStatus, fStep, fVisit, fError, fFinished, fPending, fEnding, fFailedStep,
	fCompensated, fFingerprint, fTrace, fStartedAt, fUpdatedAt}

// scan reads the runs index newest first, page by page, with fields of each run's hash (HMGET),
// until each returns false. Ids whose hash is gone (expired) are skipped, not removed: a read changes
// nothing (the status page's GETs call it, SPEC §15); RunTimers' hygiene prunes the index.
func (s *Store) scan(ctx context.Context, fields []string, each func(id string, h map[string]string) (bool, error)) error {
	for start := int64(0); ; start += listPage {
		ids, err := s.c.ZRevRange(ctx, s.k.runs(), start, start+listPage-1).Result()
		if err != nil {
			return fmt.Errorf("redisrun: read runs of %s: %w", s.g.Name, err)
		}
		if len(ids) == 0 {
			return nil
		}
		pipe := s.c.Pipeline()
		hs := make([]*redis.SliceCmd, len(ids))
		for i, id := range ids {
			hs[i] = pipe.HMGet(ctx, s.k.run(id), fields...)
		}
		if err := redisconn.ExecPipe(ctx, pipe); err != nil {
			return fmt.Errorf("redisrun: read runs of %s: %w", s.g.Name, err)
		}
		for i, h := range hs {
			if err := h.Err(); err != nil {
				return fmt.Errorf("redisrun: read run %s: %w", ids[i], err)
			}
			m := make(map[string]string, len(fields))
			for j, v := range h.Val() {
				if str, ok := v.(string); ok {
					m[fields[j]] = str
				}
			}
			if m[fStatus] == "" {
				continue // expired (every run record has a status)
			}
			more, err := each(ids[i], m)
			if err != nil || !more {
				return err
			}
		}
	}
}

// Counts reads the active runs per step (the active hash, kept by the scripts) and the runs per
// status (a scan of the runs index: every run kept, active or within retention).
func (s *Store) Counts(ctx context.Context) (active map[string]int64, byStatus map[workflow.Status]int64, err error) {
	if active, err = s.Active(ctx); err != nil {
		return nil, nil, err
	}
	byStatus = map[workflow.Status]int64{}
	err = s.scan(ctx, []string{fStatus}, func(_ string, h map[string]string) (bool, error) {
		byStatus[workflow.Status(h[fStatus])]++
		return true, nil
	})
	return active, byStatus, err
}

// Active reads the active runs per step (steps with none are left out): one HGETALL of the
// hash the scripts keep, cheap enough for every metrics scrape (flowrun_runs_active).
func (s *Store) Active(ctx context.Context) (map[string]int64, error) {
	a, err := s.c.HGetAll(ctx, s.k.active()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisrun: read active runs of %s: %w", s.g.Name, err)
	}
	active := make(map[string]int64, len(a))
	for step, v := range a {
		if n, _ := strconv.ParseInt(v, 10, 64); n > 0 {
			active[step] = n
		}
	}
	return active, nil
}

// Graph is the workflow the store keeps runs of.
func (s *Store) Graph() *workflow.Graph { return s.g }

// NewRunID is a random run id (a run started without run_id and without a message id).
func NewRunID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Begin starts a run from the command line (runs start) and returns its id.
func (s *Store) Begin(ctx context.Context, input []byte, fingerprint string) (string, error) {
	if !json.Valid(input) {
		return "", fmt.Errorf("redisrun: input is not JSON")
	}
	id := NewRunID()
	st, t := s.g.Start(id, json.RawMessage(input), time.Now())
	st.Fingerprint = fingerprint
	st.TraceParent = s.runTrace(ctx, id)
	ok, err := s.Create(ctx, st, t)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("redisrun: run %s exists", id)
	}
	return id, nil
}

// ErrNotActive is returned by Cancel for a run that has ended, or that is compensating already
// (it ends as it was going to).
var ErrNotActive = errors.New("run is not active")

// changeRetries bounds how often Cancel and Retry read the run again after it moved under them.
const changeRetries = 5

// Cancel cancels a running run (runs cancel), compensations first under "compensate";
// workflow.ErrNoRun when there is none, ErrNotActive when it has ended or is compensating.
func (s *Store) Cancel(ctx context.Context, id string) error {
	return s.change(ctx, id, false, func(st *workflow.State) (workflow.Transition, error) {
		if !st.Status.Active() {
			return workflow.Transition{}, fmt.Errorf("redisrun: run %s is %s: %w", id, st.Status, ErrNotActive)
		}
		return s.g.Cancel(st, time.Now()), nil
	})
}

// Retry resumes a failed run at its failed step (runs retry, dlq redrive); the error of
// workflow.Graph.Retry for a run that is not failed or was compensated.
func (s *Store) Retry(ctx context.Context, id string) error {
	return s.change(ctx, id, true, func(st *workflow.State) (workflow.Transition, error) {
		return s.g.Retry(st, time.Now())
	})
}

// change applies the transition decide makes of the run as it is, reading it again when a step
// moved it meanwhile; resume lets it apply to an ended run (Retry).
func (s *Store) change(ctx context.Context, id string, resume bool, decide func(*workflow.State) (workflow.Transition, error)) error {
	for range changeRetries {
		st, err := s.Get(ctx, id)
		if err != nil {
			return err
		}
		t, err := decide(st)
		if err != nil {
			return err
		}
		if t.Visit == workflow.NoVisit {
			// The graph changes nothing (a cancel of a run compensating already: it ends as
			// it was going to).
			return fmt.Errorf("redisrun: run %s is %s: %w", id, st.Status, ErrNotActive)
		}
		op := applyOp{t: t, resume: resume, prev: st}
		if resume {
			// The run span ended when the run failed; what follows is a new one, its child.
			op.retrace = engine.RunRetrace(st.TraceParent, t.At)
		}
		ok, err := s.exec(ctx, op)
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("redisrun: run %s keeps moving; try again", id)
}
