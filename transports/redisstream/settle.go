package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// copyOp is one copy to write before its original is acknowledged.
type copyOp struct {
	idx    int    // index in the batch
	id     string // the original's entry id
	key    string // destination
	zset   bool   // ZADD member score (durable delay) instead of XADD fields
	fields []string
	member string
	score  float64
}

func (op copyOp) command() string {
	if op.zset {
		return "zadd"
	}
	return "xadd"
}

// Settle carries out a batch (SPEC §4), sent on the pool, never on the reading connection, in
// one round trip when every key shares the stream's slot (always outside a cluster):
//
//   - ActAck: one XACK for every acknowledged id of the batch.
//   - ActRequeue, ActDeadLetter: XADD the copy to the stream or the dead-letter stream, then
//     XACK the original.
//   - ActDelay: ZADD delay_key (score: due time in unix ms) the encoded copy, then XACK.
//   - ActLeave: nothing is sent; the entry stays pending, kept from looking idle until
//     HoldUntil (claiming, reclaim).
//
// Copies on the stream's slot go in one script (settleScript): per delivery it writes the copy
// and only when that succeeded acknowledges the original, atomically, so a copy that cannot be
// written (WRONGTYPE, NOPERM) never lets its original go, and a resend finds an already settled
// entry no longer pending and writes nothing. A copy to a key in another cluster slot is written
// first on its own, remembered, and its original acknowledged only after that. Each failure is
// reported per delivery with its command, key and Redis's own error (engine.SettleError).
func (s *Source) Settle(ctx context.Context, batch []engine.Settlement) error {
	if len(batch) == 0 {
		return nil
	}
	var se engine.SettleError
	fail := func(i int, command, key string, err error) {
		se.Add(redisconn.Fault(i, command, key, err, s.secrets...))
	}
	now := time.Now() // a hold that ends before the batch was sent is no hold
	p := s.planSettle(batch, fail)
	s.writeRemote(ctx, &p, fail)
	done := s.writeLocal(ctx, p, fail)
	s.untrackSettled(batch, done, now)
	return se.Err()
}

// faultFunc reports a settlement's failure: its batch index, the command, the key.
type faultFunc func(i int, command, key string, err error)

// settlePlan is what a batch writes: acknowledgements on their own, copies on the stream's slot
// (the script), copies to other slots (cluster).
type settlePlan struct {
	// acks is the XACK of the ids acknowledged on their own, its arguments laid out at once
	// and each id the delivery's Token as boxed when it was read: go-redis's XAck grows its
	// arguments and boxes every id again, an allocation per message.
	acks   []any
	ackIdx []int    // their batch indexes
	local  []copyOp // copies in one slot with the stream: the script
	remote []copyOp // copies to other slots (cluster)
}

func (p *settlePlan) ack(id any, i int) {
	p.acks, p.ackIdx = append(p.acks, id), append(p.ackIdx, i)
}

// tokenArg is tokenID(d) as a command argument, boxed once: the Token itself where it holds
// the id (go-redis writes a *string as the string).
func tokenArg(d *engine.Delivery) any {
	switch t := d.Token.(type) {
	case *string:
		if t != nil && *t != "" {
			return d.Token
		}
	case string:
		if t != "" {
			return d.Token
		}
	}
	return d.ID
}

// planSettle sorts the batch into what it writes; a settlement that cannot be carried out is
// failed here, and ActLeave writes nothing.
func (s *Source) planSettle(batch []engine.Settlement, fail faultFunc) settlePlan {
	p := settlePlan{acks: make([]any, 3, 3+len(batch)), ackIdx: make([]int, 0, len(batch))}
	p.acks[0], p.acks[1], p.acks[2] = "xack", s.o.Stream, s.o.Group
	for i := range batch {
		st := &batch[i]
		if st.Delivery == nil {
			fail(i, "settle", s.o.Stream, fmt.Errorf("settlement without a delivery: %w", engine.ErrPermanent))
			continue
		}
		id := tokenID(st.Delivery)
		switch st.Action {
		case engine.ActAck:
			p.ack(tokenArg(st.Delivery), i)
			continue
		case engine.ActLeave:
			continue // handled after the commands succeed
		}
		op, ok := s.copyFor(i, st, id, fail)
		switch {
		case !ok:
		case s.sameSlot(op.key):
			p.local = append(p.local, op)
		case s.copies.has(id):
			// Written by an earlier call that failed later: only the acknowledgement is left.
			p.ack(id, i)
		default:
			p.remote = append(p.remote, op)
		}
	}
	return p
}

// copyFor is the copy settlement i writes before its original is acknowledged (requeue, dead
// letter, durable delay); false, the failure reported, where there is none to write.
func (s *Source) copyFor(i int, st *engine.Settlement, id string, fail faultFunc) (copyOp, bool) {
	var op copyOp
	switch st.Action {
	case engine.ActRequeue:
		op = copyOp{key: s.o.Stream}
	case engine.ActDeadLetter:
		if st.DeadLetterKey == "" {
			fail(i, "xadd", "", fmt.Errorf("dead letter for %s: no dead-letter key: %w", id, engine.ErrPermanent))
			return op, false
		}
		op = copyOp{key: st.DeadLetterKey}
	case engine.ActDelay:
		if !s.durable {
			fail(i, "zadd", s.o.DelayKey, fmt.Errorf("delay %s: durable delays are off (delayed_retry = %q): %w",
				id, s.o.DelayedRetry, engine.ErrUnsupported))
			return op, false
		}
		op = copyOp{key: s.o.DelayKey, zset: true}
	default:
		fail(i, "settle", s.o.Stream, fmt.Errorf("settle %s: action %d: %w", id, st.Action, engine.ErrUnsupported))
		return op, false
	}
	if st.Copy == nil {
		fail(i, op.command(), op.key, fmt.Errorf("%s %s: no copy to write: %w", st.Action, id, engine.ErrPermanent))
		return op, false
	}
	op.idx, op.id = i, id
	if op.zset {
		op.member = encodeDelayed(s.o.Stream, id, st.Copy)
		op.score = float64(st.Due.UnixMilli())
	} else {
		op.fields = codec.StreamFields(st.Copy)
	}
	return op, true
}

// writeRemote writes the copies on other slots first, pipelined; an original is acknowledged
// (added to p's acknowledgements) only after its copy is written.
func (s *Source) writeRemote(ctx context.Context, p *settlePlan, fail faultFunc) {
	if len(p.remote) == 0 {
		return
	}
	pipe := s.c.Pipeline()
	for _, op := range p.remote {
		addCopy(ctx, pipe, op)
	}
	cmds, err := execCmds(ctx, pipe)
	for j, op := range p.remote {
		if cerr := cmdErr(cmds, j, err); cerr != nil {
			fail(op.idx, op.command(), op.key, cerr)
			continue
		}
		s.copies.add(op.id)
		p.ack(op.id, op.idx)
	}
}

// writeLocal sends the acknowledgements and the script of the stream slot's copies in one round
// trip, and returns the batch indexes settled.
func (s *Source) writeLocal(ctx context.Context, p settlePlan, fail faultFunc) []int {
	var done []int
	if len(p.ackIdx) == 0 && len(p.local) == 0 {
		return nil
	}
	pipe := s.c.Pipeline()
	var ack *redis.IntCmd
	if len(p.ackIdx) > 0 {
		ack = redis.NewIntCmd(ctx, p.acks...)
		_ = pipe.Process(ctx, ack)
	}
	var script *redis.Cmd
	keys, args := s.scriptArgs(p.local)
	if len(p.local) > 0 {
		script = settleScript.EvalSha(ctx, pipe, keys, args...)
	}
	err := redisconn.ExecPipe(ctx, pipe)
	if script != nil && redisconn.IsNoScript(script.Err()) {
		script = settleScript.Eval(ctx, s.c, keys, args...) // Redis restarted: load it again
	}
	if ack != nil {
		if aerr := redisconn.FirstErr(ack.Err(), err); aerr != nil {
			for _, i := range p.ackIdx {
				fail(i, "xack", s.o.Stream, aerr)
			}
		} else {
			done = p.ackIdx // the plan is not read again: its indexes are taken, not copied
		}
	}
	if script != nil {
		done = s.scriptResults(p.local, script, err, done, fail)
	}
	return done
}

// untrackSettled untracks what is settled (a failed settlement stays tracked for its resend)
// and holds what is left pending (ActLeave) until its HoldUntil, if that is after now.
func (s *Source) untrackSettled(batch []engine.Settlement, done []int, now time.Time) {
	for _, i := range done {
		if batch[i].Action == engine.ActDelay {
			s.lowerNextDue(batch[i].Due.UnixMilli())
		}
	}
	s.track.removeSettled(batch, done)
	s.copies.removeSettled(batch, done)
	for i := range batch {
		if st := &batch[i]; st.Action == engine.ActLeave && st.Delivery != nil {
			if s.o.Kind == KindStream {
				// No keep-alive here: the entry waits for the next pending re-read.
				s.track.remove([]string{tokenID(st.Delivery)})
				continue
			}
			s.track.hold(tokenID(st.Delivery), st.HoldUntil, now)
		}
	}
}

// scriptArgs lays out the local copies for settleScript: KEYS = the stream, then each distinct
// destination; ARGV = group, then per copy: kind ("x" XADD, "z" ZADD), id, the destination's
// KEYS index, the number of values, the values.
func (s *Source) scriptArgs(ops []copyOp) ([]string, []any) {
	if len(ops) == 0 {
		return nil, nil
	}
	keys := []string{s.o.Stream}
	keyIdx := map[string]int{s.o.Stream: 1}
	args := make([]any, 0, 1+len(ops)*8)
	args = append(args, s.o.Group)
	for _, op := range ops {
		k, ok := keyIdx[op.key]
		if !ok {
			keys = append(keys, op.key)
			k = len(keys)
			keyIdx[op.key] = k
		}
		if op.zset {
			args = append(args, "z", op.id, k, 2, strconv.FormatFloat(op.score, 'f', -1, 64), op.member)
			continue
		}
		args = append(args, "x", op.id, k, len(op.fields))
		for _, f := range op.fields {
			args = append(args, f)
		}
	}
	return keys, args
}

// scriptResults reads settleScript's reply: per copy "ok", "settled" (not pending any more: an
// earlier call did it) or "COMMAND\tERROR" for the command that failed.
func (s *Source) scriptResults(ops []copyOp, script *redis.Cmd, pipeErr error, done []int, fail faultFunc) []int {
	res, err := script.Slice()
	if err = redisconn.FirstErr(err, pipeErr); err == nil && len(res) != len(ops) {
		err = fmt.Errorf("settle script: %d results for %d copies", len(res), len(ops))
	}
	if err != nil {
		// The script as a whole was refused (e.g. NOPERM on one of its keys): name each copy's
		// own destination, the key an operator has to look at.
		for _, op := range ops {
			fail(op.idx, "evalsha", op.key, err)
		}
		return done
	}
	for j, op := range ops {
		r, _ := res[j].(string)
		switch r {
		case "ok", "settled":
			done = append(done, op.idx)
			continue
		}
		cmd, msg, ok := strings.Cut(r, "\t") // "command<TAB>Redis's error"
		if !ok {
			cmd, msg = op.command(), r
		}
		key := op.key
		if cmd == "xack" || cmd == "xpending" {
			key = s.o.Stream
		}
		fail(op.idx, cmd, key, redisconn.ServerError(msg))
	}
	return done
}

func addCopy(ctx context.Context, p redis.Pipeliner, op copyOp) {
	if op.zset {
		p.ZAdd(ctx, op.key, redis.Z{Score: op.score, Member: op.member})
		return
	}
	p.XAdd(ctx, &redis.XAddArgs{Stream: op.key, ID: "*", Values: op.fields})
}

// cmdErr is command i's error, or the pipeline's when the command has none to tell (go-redis
// leaves commands blank when the connection failed before their replies).
func cmdErr(cmds []redis.Cmder, i int, pipeErr error) error {
	if i >= len(cmds) {
		if pipeErr != nil {
			return pipeErr
		}
		return errors.New("no reply")
	}
	return redisconn.FirstErr(cmds[i].Err(), pipeErr)
}

// execCmds runs a pipeline; err is the pipeline's failure only when no command carries its own.
func execCmds(ctx context.Context, pipe redis.Pipeliner) ([]redis.Cmder, error) {
	cmds := pipe.Cmds()
	return cmds, redisconn.ExecPipe(ctx, pipe)
}

func (s *Source) sameSlot(key string) bool {
	return key == s.o.Stream || key == s.o.DelayKey || redisconn.SameSlot(s.c, s.o.Stream, key)
}

// Requeue writes runtime copies (held retry_after copies that came due) back onto the stream,
// pipelined. A copy that failed is named in an engine.SettleError; the others are written and
// are not sent again.
func (s *Source) Requeue(ctx context.Context, msgs []*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pipe := s.c.Pipeline()
	for _, m := range msgs {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.o.Stream, ID: "*", Values: codec.StreamFields(m)})
	}
	cmds, err := execCmds(ctx, pipe)
	var se engine.SettleError
	for i := range msgs {
		if cerr := cmdErr(cmds, i, err); cerr != nil {
			se.Add(redisconn.Fault(i, "xadd", s.o.Stream, cerr, s.secrets...))
		}
	}
	return se.Err()
}

// Release forgets a delivery whose settlement the engine abandoned: it stays pending, and the
// source's own rules take it back (a claiming read once idle, a stream's pending re-read).
func (s *Source) Release(st engine.Settlement) {
	if st.Delivery != nil {
		ids := []string{tokenID(st.Delivery)}
		s.track.remove(ids)
		s.copies.remove(ids)
	}
}

// copiedSet remembers ids whose copy went to another cluster slot while their acknowledgement
// has not gone through yet, so that a resend writes the copy only once.
type copiedSet struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (c *copiedSet) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[id]
	return ok
}

func (c *copiedSet) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]struct{}{}
	}
	c.m[id] = struct{}{}
}

// removeSettled removes the ids of batch's settlements at done.
func (c *copiedSet) removeSettled(batch []engine.Settlement, done []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) == 0 { // outside a cluster, always: no lookup per id
		return
	}
	for _, i := range done {
		delete(c.m, tokenID(batch[i].Delivery))
	}
}

func (c *copiedSet) remove(ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) == 0 { // outside a cluster, always: no lookup per id
		return
	}
	for _, id := range ids {
		delete(c.m, id)
	}
}

// Return takes back deliveries handed over but never started (a stop): they stay pending, for
// the next start (stream) or for min_idle (claiming, reclaim).
func (s *Source) Return(ds []*engine.Delivery) {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = tokenID(d)
	}
	s.track.remove(ids)
}

var (
	_ engine.Releaser = (*Source)(nil)
	_ engine.Returner = (*Source)(nil)
)
