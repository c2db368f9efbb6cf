package redisrun

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/workflow"
)

// maxCommit is the most creations one round trip carries.
const maxCommit = 256

// committer sends the run creations of concurrent start handlers together: the first caller
// while none is in flight sends every creation queued by then in one pipeline, and again for
// those queued meanwhile, answering each. A start handler's work is that one write, so its
// cost is the round trip; sharing it is what makes the start keep up with the steps, which
// settle in batches. A failed round trip (Redis away for a moment, or refusing the write for
// good) fails each creation in it: each start handler answers retry with the error, so its
// start message is tried again under the start's max_attempts, as a lone creation was. The
// leader's context carries the round trip, as each caller's own would: they share one
// pipeline's grace. The zero value is ready.
type committer struct {
	mu      sync.Mutex
	queue   []*createReq
	sending bool
}

type createReq struct {
	op   applyOp
	ok   bool
	err  error
	done chan struct{}
}

// Create writes a new run and enters its first step; false when a run with that id exists
// (active, or finished within retention). Concurrent calls share a round trip (committer).
func (s *Store) Create(ctx context.Context, st *workflow.State, t workflow.Transition) (bool, error) {
	if t.Run == "" {
		t.Run = st.ID
	}
	req := &createReq{op: applyOp{create: st, t: t}, done: make(chan struct{})}
	c := &s.creates
	c.mu.Lock()
	c.queue = append(c.queue, req)
	if c.sending {
		c.mu.Unlock()
		<-req.done
		return req.ok, req.err
	}
	c.sending = true
	for len(c.queue) > 0 {
		n := min(len(c.queue), maxCommit)
		batch := c.queue[:n:n]
		c.queue = c.queue[n:]
		c.mu.Unlock()
		s.sendCreates(ctx, batch)
		c.mu.Lock()
	}
	c.sending = false
	c.queue = nil
	c.mu.Unlock()
	return req.ok, req.err
}

// sendCreates sends batch in one pipeline and answers each request.
func (s *Store) sendCreates(ctx context.Context, batch []*createReq) {
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	args := make([][]any, len(batch))
	keys := make([][]string, len(batch))
	for i, r := range batch {
		keys[i], args[i] = s.call(r.op)
		cmds[i] = applyScript.EvalSha(ctx, pipe, keys[i], args[i]...)
	}
	perr := redisconn.ExecPipe(ctx, pipe)
	for i, r := range batch {
		v, err := s.reply(ctx, applyScript, cmds[i], keys[i], args[i], perr)
		if err != nil {
			r.err = fmt.Errorf("redisrun: %s run %s: %w", s.g.Name, r.op.t.Run, err)
		} else if r.ok, _, r.err = result(v); r.ok {
			s.done(r.op.t, r.op.create.StartedAt, r.op.trace())
			st := *r.op.create
			st.History, st.Input = nil, bytes.Clone(st.Input) // not the start message's read buffer
			s.known.put(&st)
		}
		close(r.done)
	}
}

// reply is cmd's answer from a pipeline that ended with perr, sent again alone with EVAL when
// Redis had lost the script (a restart, SCRIPT FLUSH).
func (s *Store) reply(ctx context.Context, sc *redis.Script, cmd *redis.Cmd, keys []string, args []any, perr error) (any, error) {
	v, err := cmd.Result()
	if perr == nil && redisconn.IsNoScript(err) {
		v, err = sc.Eval(ctx, s.c, keys, args...).Result()
	}
	return v, redisconn.FirstErr(err, perr)
}
