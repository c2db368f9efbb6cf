package redisrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/workflow"
)

// Step source defaults.
const (
	DefaultStepBatch   = 100
	DefaultStepBlock   = time.Second
	DefaultStepMinIdle = time.Minute
	DefaultStepLinger  = 2 * time.Millisecond
)

// stepSource is one step's source (Store.StepSource). Receive runs in one goroutine, Settle in
// another.
type stepSource struct {
	engine.ErrorHook // failed reads count as source errors

	s       *Store
	step    string
	stream  string
	o       StepOptions
	log     zerolog.Logger
	secrets []string

	mu       sync.Mutex
	inflight map[string]struct{} // entry ids handed over and not settled yet
	ready    atomic.Bool

	kaOnce sync.Once
	kaStop context.CancelFunc
	kaDone chan struct{}
}

var (
	_ engine.Source   = (*stepSource)(nil)
	_ engine.Releaser = (*stepSource)(nil)
	_ engine.Returner = (*stepSource)(nil)
)

// StepSource returns the source of one step's visits: it reads the step's stream (group: the
// workflow's name) and takes over entries idle for MinIdle in other consumers (XAUTOCLAIM), loads
// each delivery's run into engine.Run (State a *workflow.Visit) and settles a visit with one
// script. The step's stream is flowrun:{<workflow>}:s:<step>.
func (s *Store) StepSource(step string, o StepOptions, log zerolog.Logger) engine.Source {
	if o.Batch <= 0 {
		o.Batch = DefaultStepBatch
	}
	if o.Block <= 0 {
		o.Block = DefaultStepBlock
	}
	if o.MinIdle <= 0 {
		o.MinIdle = DefaultStepMinIdle
	}
	if o.Consumer == "" {
		o.Consumer = "flowrun"
	}
	if o.Linger == 0 {
		o.Linger = DefaultStepLinger
	}
	stream := s.k.step(step)
	if o.Pure {
		s.known.allow(step)
	}
	return &stepSource{
		s: s, step: step, stream: stream, o: o,
		log:      log.With().Str("workflow", s.g.Name).Str("step", step).Logger(),
		secrets:  redisconn.SecretsOf(s.c),
		inflight: map[string]struct{}{},
	}
}

// Capabilities: acknowledged (XACK), durable delays (the workflow's delayed set), batched reads.
func (src *stepSource) Capabilities() engine.Capabilities {
	return engine.Capabilities{Ack: true, DurableDelay: true, Batch: src.o.Batch}
}

// Ready reports whether the last read succeeded.
func (src *stepSource) Ready() bool { return src.ready.Load() }

// Receive reads until ctx ends: first this consumer's own pending entries (left by its last
// run), then new entries, and every claimPause the entries other consumers left idle for
// MinIdle (a dead process's). A failing read is retried with backoff and logged once per
// state change.
func (src *stepSource) Receive(ctx context.Context, feed engine.Feed) error {
	src.startKeepAlive()
	r := &stepReader{src: src, rc: src.s.c}
	if rc := src.readClient(); rc != nil {
		stop := context.AfterFunc(ctx, func() { rc.Close() }) // cuts a blocked read short
		defer func() {
			stop()
			rc.Close()
		}()
		r.rc = rc
	}
	r.reset()
	var bo redisconn.Backoff
	state := redisconn.NewStateLog(src.log, "workflow step read", src.secrets...)
	for ctx.Err() == nil {
		ds, err := r.read(ctx, feed)
		if err == nil {
			src.ready.Store(true)
			state.OK()
			bo.Reset()
		}
		if len(ds) > 0 && !feed.Push(ctx, ds) {
			src.Return(ds) // they stay pending, for the next start or a takeover
		}
		if err == nil && len(ds) > 0 && len(ds) < src.o.Batch/4 && src.o.Linger > 0 {
			redisconn.Sleep(ctx, src.o.Linger)
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		src.ready.Store(false)
		state.Fail(redisconn.RedactError(err, src.secrets...))
		src.ReportError()
		r.reset()
		redisconn.Sleep(ctx, bo.Next())
	}
	return nil
}

// readClient is a one-connection client of the source's own for blocking reads, closed at a
// stop so a stop never waits out a block; nil on a Cluster (reads use the shared client).
func (src *stepSource) readClient() *redis.Client {
	c, ok := src.s.c.(*redis.Client)
	if !ok {
		return nil
	}
	o := *c.Options()
	o.PoolSize, o.MinIdleConns, o.MaxActiveConns, o.MaxRetries = 1, 0, 0, -1
	return redis.NewClient(&o)
}

// stepReader is Receive's state.
type stepReader struct {
	src       *stepSource
	rc        redis.UniversalClient // blocking reads
	needGroup bool
	pending   bool   // re-reading own pending entries
	cursor    string // own pending: last id read
	claim     string // XAUTOCLAIM cursor
	nextClaim time.Time
}

func (r *stepReader) reset() {
	r.needGroup, r.pending, r.cursor, r.claim = true, true, "0", "0-0"
}

// claimPause is how long a takeover pass that found nothing is not repeated.
func (r *stepReader) claimPause() time.Duration { return min(r.src.o.MinIdle/10, time.Second) }

// read is one round: at most feed's room of own pending, taken-over or new entries, with
// their runs.
func (r *stepReader) read(ctx context.Context, feed engine.Feed) ([]*engine.Delivery, error) {
	src := r.src
	if r.needGroup {
		err := src.s.c.XGroupCreateMkStream(ctx, src.stream, src.s.g.Name, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return nil, fmt.Errorf("redisrun: create group %s on %s: %w", src.s.g.Name, src.stream, err)
		}
		r.needGroup = false
	}
	room := min(feed.Room(ctx), src.o.Batch)
	if room == 0 {
		return nil, ctx.Err()
	}
	var msgs []redis.XMessage
	var err error
	news := 0 // msgs[news:] were never delivered before (read with ">")
	switch {
	case r.pending:
		msgs, err = r.readGroup(ctx, src.s.c, r.cursor, room, -1)
		if err == nil {
			if len(msgs) == 0 {
				r.pending = false
			} else {
				r.cursor = msgs[len(msgs)-1].ID
			}
		}
		news = len(msgs)
	default:
		msgs, err = r.takeOver(ctx, room)
		if err == nil && len(msgs) < room {
			block := src.o.Block
			if len(msgs) > 0 {
				block = -1 // work in hand: do not wait for more
			}
			var fresh []redis.XMessage
			fresh, err = r.readGroup(ctx, r.rc, ">", room-len(msgs), block)
			news = len(msgs)
			msgs = append(msgs, fresh...)
		}
	}
	if len(msgs) == 0 {
		return nil, err
	}
	old := src.fresh(msgs[:news])
	msgs = append(old, src.fresh(msgs[news:])...)
	ds, lerr := src.deliveries(ctx, msgs, len(old))
	if lerr != nil {
		// The entries are this consumer's pending: read again from the start of its pending
		// list once the error passes.
		return nil, lerr
	}
	return ds, err
}

// takeOver claims entries idle for MinIdle in any consumer (a dead one's), every claimPause
// while there are none.
func (r *stepReader) takeOver(ctx context.Context, room int) ([]redis.XMessage, error) {
	src := r.src
	if time.Now().Before(r.nextClaim) {
		return nil, nil
	}
	msgs, next, err := src.s.c.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: src.stream, Group: src.s.g.Name, Consumer: src.o.Consumer,
		MinIdle: src.o.MinIdle, Start: r.claim, Count: int64(room),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("redisrun: xautoclaim %s: %w", src.stream, err)
	}
	r.claim = next
	if next == "0-0" || next == "" {
		r.claim = "0-0"
		r.nextClaim = time.Now().Add(r.claimPause())
	}
	if len(msgs) > 0 {
		src.log.Debug().Int("count", len(msgs)).Msg("took over idle step messages")
	}
	return msgs, nil
}

func (r *stepReader) readGroup(ctx context.Context, c redis.Cmdable, id string, count int, block time.Duration) ([]redis.XMessage, error) {
	src := r.src
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: src.s.g.Name, Consumer: src.o.Consumer, Streams: []string{src.stream, id},
		Count: int64(count), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) || len(res) == 0 && err == nil {
		return nil, nil
	}
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOGROUP") {
			r.needGroup = true
		}
		return nil, fmt.Errorf("redisrun: xreadgroup %s: %w", src.stream, err)
	}
	return res[0].Messages, nil
}

// fresh drops entries already in flight here (a slow handler's entry that XAUTOCLAIM found
// idle, or a pending re-read after an error) and tracks the rest.
func (src *stepSource) fresh(msgs []redis.XMessage) []redis.XMessage {
	src.mu.Lock()
	defer src.mu.Unlock()
	keep := msgs[:0]
	for _, m := range msgs {
		if _, busy := src.inflight[m.ID]; busy {
			continue
		}
		src.inflight[m.ID] = struct{}{}
		keep = append(keep, m)
	}
	return keep
}

func (src *stepSource) untrack(ids []string) {
	src.mu.Lock()
	defer src.mu.Unlock()
	for _, id := range ids {
		delete(src.inflight, id)
	}
}

// Return forgets deliveries handed back at a stop: they stay pending.
func (src *stepSource) Return(ds []*engine.Delivery) {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	src.untrack(ids)
}

// Release forgets a delivery whose settlement the engine abandoned; it stays pending and comes
// back by takeover once idle.
func (src *stepSource) Release(st engine.Settlement) {
	if st.Delivery != nil {
		src.untrack([]string{st.Delivery.ID})
	}
}

// loaded is one run as read with a batch.
type loaded struct {
	st    *workflow.State
	input any
	steps map[string]any
}

// deliveries loads the runs of msgs in one round trip (HGETALL of each run's record and, unless
// SkipSteps, HGETALL of its outputs) and makes each entry a delivery whose Run is its visit.
// Entries whose data is gone (a trimmed stream) are acknowledged. A pure step's entry from
// msgs[news:] (never delivered before) whose run this process moved into this visit is not
// loaded: it starts from the run as that transition left it (knownRuns).
func (src *stepSource) deliveries(ctx context.Context, msgs []redis.XMessage, news int) ([]*engine.Delivery, error) {
	runs := map[string]*loaded{}
	if src.o.Pure {
		src.knownRuns(msgs[news:], runs)
	}
	pipe := src.s.c.Pipeline()
	type load struct {
		h   *redis.Cmd
		out *redis.MapStringStringCmd
	}
	loads := map[string]load{}
	var gone []string
	for _, m := range msgs {
		if len(m.Values) == 0 {
			gone = append(gone, m.ID)
			continue
		}
		id, _ := m.Values[msgRun].(string)
		if _, ok := loads[id]; ok || id == "" || runs[id] != nil {
			continue
		}
		l := load{h: redis.NewCmd(ctx, loadArgs(src.s.k.run(id))...)}
		_ = pipe.Process(ctx, l.h)
		if !src.o.SkipSteps {
			l.out = pipe.HGetAll(ctx, src.s.k.out(id))
		}
		loads[id] = l
	}
	if len(gone) > 0 {
		pipe.XAck(ctx, src.stream, src.s.g.Name, gone...)
		src.untrack(gone)
	}
	if len(loads) > 0 || len(gone) > 0 {
		if err := redisconn.ExecPipe(ctx, pipe); err != nil {
			src.untrack(ids(msgs))
			return nil, fmt.Errorf("redisrun: load runs of %s: %w", src.stream, err)
		}
	}
	for id, l := range loads {
		var out map[string]string
		err := l.h.Err()
		if l.out != nil {
			err, out = redisconn.FirstErr(err, l.out.Err()), l.out.Val()
		}
		if err != nil {
			src.untrack(ids(msgs))
			return nil, fmt.Errorf("redisrun: load run %s: %w", id, err)
		}
		st, err := decodeLoaded(src.s.g.Name, id, l.h.Val(), out)
		if err != nil {
			src.log.Warn().Err(err).Msg("run record does not decode; its step messages are acknowledged unrun")
		}
		runs[id] = newLoaded(st, !src.o.SkipInput, !src.o.SkipSteps)
	}
	out := make([]*engine.Delivery, 0, len(msgs))
	for _, m := range msgs {
		if len(m.Values) > 0 {
			out = append(out, src.delivery(m, runs))
		}
	}
	return out, nil
}

// knownRuns fills runs with the known runs (Store.known) of msgs at their messages' visits, as
// deliveries sees them; a run whose outputs are not all known is left to load when the step
// reads them.
func (src *stepSource) knownRuns(msgs []redis.XMessage, runs map[string]*loaded) {
	for _, m := range msgs {
		id, _ := m.Values[msgRun].(string)
		vs, _ := m.Values[msgVisit].(string)
		visit, err := atoi(vs)
		if id == "" || err != nil || runs[id] != nil {
			continue
		}
		if st := src.s.known.take(id, visit); st != nil && (src.o.SkipSteps || st.Steps != nil) {
			runs[id] = newLoaded(st, !src.o.SkipInput, !src.o.SkipSteps)
		}
	}
}

func ids(msgs []redis.XMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// newLoaded is st as its deliveries see it: the input decoded when input, the outputs when
// steps and st has them.
func newLoaded(st *workflow.State, input, steps bool) *loaded {
	if st == nil {
		return nil
	}
	l := &loaded{st: st}
	if input {
		l.input = decodeJSON(st.Input)
	}
	if steps && st.Steps != nil {
		l.steps = make(map[string]any, len(st.Steps))
		for k, v := range st.Steps {
			l.steps[k] = decodeJSON(v)
		}
	}
	return l
}

// decodeJSON is a stored JSON value as expressions see it (a string when it is not JSON).
func decodeJSON(b []byte) any {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	return v
}

// delivery is entry m as a step visit. A message of a run that is gone, that is not active, or
// whose visit is not the run's is stale (acknowledged unrun); so is one that names no run.
func (src *stepSource) delivery(m redis.XMessage, runs map[string]*loaded) *engine.Delivery {
	d := &engine.Delivery{Token: m.ID}
	d.Key, d.ID = src.stream, m.ID
	codec.DecodeStream(&d.Message, m.Values)
	id := d.Headers[msgRun]
	visit, err := atoi(d.Headers[msgVisit])
	if err != nil {
		visit = 0
	}
	v := &workflow.Visit{Stale: true}
	run := &engine.Run{ID: id, Workflow: src.s.g.Name, Step: src.step, Visit: visit, State: v}
	if l := runs[id]; l != nil {
		v.State = l.st
		v.Stale = err != nil || l.st.Stale(visit)
		run.StartedAt, run.Input, run.Steps = l.st.StartedAt, l.input, l.steps
	} else {
		// No run: a stale visit all the same, with a record to say which run it named.
		v.State = &workflow.State{ID: id, Workflow: src.s.g.Name}
	}
	d.Run = run
	return d
}
