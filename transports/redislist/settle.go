package redislist

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// Settle executes a batch of settlements and reports a failure per delivery
// (engine.SettleError) with its command, key and Redis's own error; the others are done.
//
// Reliable list, per delivery: ActAck → LREM processing -1 element (from the tail, where the
// oldest elements are, so the scan is short); ActRequeue → LPUSH key copy, and the LREM;
// ActDeadLetter → LPUSH dead-letter list copy, and the LREM; ActDelay (durable_zset) → ZADD
// delay_key due-ms copy, and the LREM. Acknowledgements are pipelined
// LREMs; copies go, in the same round trip, in one script on the processing list's slot that
// removes the element and writes its copy atomically: when the element is no longer there (an
// earlier call settled it) nothing is written again, and when the copy cannot be written
// (WRONGTYPE, NOPERM) the element is put back. A dead letter on another cluster slot is written
// first, on its own, and remembered, so a resend does not write it again.
//
// Simple list: ActAck does nothing; ActRequeue and ActDeadLetter LPUSH the copy (pipelined),
// each at most once (redisconn.CopySettler, which Pub/Sub shares).
//
// ActLeave, and ActDelay without durable_zset, are engine.ErrUnsupported (permanent faults).
func (s *Source) Settle(ctx context.Context, batch []engine.Settlement) error {
	if !s.opts.Reliable {
		return redisconn.CopySettler{Client: s.client, Name: "redislist", Key: s.opts.Key,
			Done: settledFlag, Write: s.writeCopy}.Settle(ctx, batch)
	}
	var se engine.SettleError
	toks := s.checkSettlements(batch, &se)

	// Dead letters on another slot cannot share the script: write them first.
	s.writeStrayCopies(ctx, batch, toks, &se)

	pipe := s.client.Pipeline()
	p := s.planSettle(ctx, pipe, batch, toks)
	if len(p.rems) == 0 && len(p.copies) == 0 {
		return se.Err()
	}
	var script *redis.Cmd
	if len(p.copies) > 0 {
		script = settleScript.EvalSha(ctx, pipe, p.keys, p.args...)
	}
	err := redisconn.ExecPipe(ctx, pipe)
	if script != nil && redisconn.IsNoScript(script.Err()) {
		script = settleScript.Eval(ctx, s.client, p.keys, p.args...) // Redis restarted: load it again
	}
	s.ackResults(toks, p.rems, err, &se)
	if script != nil {
		s.copyResults(batch, toks, p.copies, script, err, &se)
	}
	return se.Err()
}

// checkSettlements returns each settlement's token, or nil with its fault added to se when the
// settlement is refused (no token, an unsupported action, a copy missing).
func (s *Source) checkSettlements(batch []engine.Settlement, se *engine.SettleError) []*token {
	toks := make([]*token, len(batch))
	for i, st := range batch {
		t, err := tokenOf(st.Delivery)
		switch {
		case err != nil:
			err = fmt.Errorf("%w: %w", err, engine.ErrPermanent)
		case st.Action == engine.ActDelay && !s.opts.durable():
			err = fmt.Errorf("redislist: settle %s: durable delays are off (delayed_retry = %q): %w", st.Action, s.opts.DelayedRetry, engine.ErrUnsupported)
		case st.Action != engine.ActAck && st.Action != engine.ActRequeue && st.Action != engine.ActDeadLetter && st.Action != engine.ActDelay:
			err = fmt.Errorf("redislist: settle %s: %w", st.Action, engine.ErrUnsupported)
		case st.Action != engine.ActAck && st.Copy == nil:
			err = fmt.Errorf("redislist: settle %s without a copy: %w", st.Action, engine.ErrPermanent)
		}
		if err != nil {
			se.Add(redisconn.Fault(i, "settle", s.opts.Key, err))
			continue
		}
		toks[i] = t
	}
	return toks
}

// remCmd is an acknowledgement's LREM, queued on the settle pipeline.
type remCmd struct {
	i   int
	cmd *redis.IntCmd
}

// settlePlan is what one Settle sends: LREMs on their own, and the settle script's keys and
// arguments for the copies.
type settlePlan struct {
	rems   []remCmd
	copies []int // batch indexes written by the script
	keys   []string
	args   []any
}

// planSettle queues the acknowledgements' LREMs on pipe and lays out the copies for the settle
// script: KEYS = the processing list, then each distinct destination; ARGV per copy = element,
// destination's KEYS index, value, due ms ("" for an LPUSH).
func (s *Source) planSettle(ctx context.Context, pipe redis.Pipeliner, batch []engine.Settlement, toks []*token) settlePlan {
	p := settlePlan{keys: []string{s.opts.Processing}, rems: make([]remCmd, 0, len(batch))}
	var keyIdx map[string]int
	// The LREMs' arguments, laid out in one allocation: go-redis's LRem allocates and boxes
	// them per delivery (the count -1 too, which as "-1" is written the same).
	args := make([]any, 0, 4*len(batch))
	for i, st := range batch {
		t := toks[i]
		if t == nil || t.done {
			continue // refused above, or settled by an earlier call the engine is resending
		}
		if st.Action == engine.ActAck || (st.Action == engine.ActDeadLetter && t.copied) {
			n := len(args)
			args = append(args, "lrem", s.remKey, "-1", t.elem)
			cmd := redis.NewIntCmd(ctx, args[n:n+4:n+4]...)
			_ = pipe.Process(ctx, cmd)
			p.rems = append(p.rems, remCmd{i, cmd})
			continue
		}
		key := s.copyKey(st)
		if keyIdx == nil {
			keyIdx = map[string]int{s.opts.Processing: 1}
		}
		k, ok := keyIdx[key]
		if !ok {
			p.keys = append(p.keys, key)
			k = len(p.keys)
			keyIdx[key] = k
		}
		if st.Action == engine.ActDelay {
			if t.member == "" { // kept, so that a resend writes the same member
				t.member = encodeDelayed(st.Copy)
			}
			p.args = append(p.args, t.elem, k, t.member, strconv.FormatInt(st.Due.UnixMilli(), 10))
		} else {
			p.args = append(p.args, t.elem, k, codec.EncodeEnvelope(st.Copy), "")
		}
		p.copies = append(p.copies, i)
	}
	return p
}

// ackResults marks each acknowledgement whose LREM went through settled, and adds a fault for
// each that did not.
func (s *Source) ackResults(toks []*token, rems []remCmd, pipeErr error, se *engine.SettleError) {
	done := make([]*token, 0, len(rems))
	for _, r := range rems {
		if cerr := redisconn.FirstErr(r.cmd.Err(), pipeErr); cerr != nil {
			se.Add(redisconn.Fault(r.i, "lrem", s.opts.Processing, cerr, s.secrets...))
			continue
		}
		toks[r.i].done = true
		done = append(done, toks[r.i])
	}
	s.uncount(done...) // under one lock for the batch
}

// copyResults reads the settle script's reply: per copy "ok", "settled" (an earlier call did it)
// or "COMMAND\tERROR" for the command that failed.
func (s *Source) copyResults(batch []engine.Settlement, toks []*token, copies []int, script *redis.Cmd, pipeErr error, se *engine.SettleError) {
	res, serr := script.Slice()
	if serr = redisconn.FirstErr(serr, pipeErr); serr == nil && len(res) != len(copies) {
		serr = fmt.Errorf("settle script: %d results for %d copies", len(res), len(copies))
	}
	for j, i := range copies {
		key := s.copyKey(batch[i])
		if serr != nil {
			se.Add(redisconn.Fault(i, "evalsha", key, serr, s.secrets...))
			continue
		}
		r, _ := res[j].(string)
		switch r {
		case "ok", "settled":
			s.settled(toks[i])
			if batch[i].Action == engine.ActDelay {
				s.lowerNextDue(batch[i].Due.UnixMilli())
			}
			continue
		}
		cmd, msg := "lpush", r
		if batch[i].Action == engine.ActDelay {
			cmd = "zadd"
		}
		if c, m, ok := strings.Cut(r, "\t"); ok { // "command<TAB>Redis's error"
			cmd, msg = c, m
			if cmd != "lpush" && cmd != "zadd" {
				key = s.opts.Processing
			}
		}
		se.Add(redisconn.Fault(i, cmd, key, redisconn.ServerError(msg), s.secrets...))
	}
}

func (s *Source) settled(t *token) {
	t.done = true
	s.uncount(t)
}

// writeStrayCopies LPUSHes the dead letters whose list is not on the processing list's slot.
func (s *Source) writeStrayCopies(ctx context.Context, batch []engine.Settlement, toks []*token, se *engine.SettleError) {
	var (
		pipe redis.Pipeliner
		cmds []*redis.IntCmd
		idx  []int
	)
	for i, st := range batch {
		t := toks[i]
		if t == nil || st.Action != engine.ActDeadLetter || t.done || t.copied ||
			redisconn.SameSlot(s.client, deadLetterKey(st), s.opts.Processing) {
			continue
		}
		if pipe == nil {
			pipe = s.client.Pipeline()
		}
		cmds = append(cmds, pipe.LPush(ctx, deadLetterKey(st), codec.EncodeEnvelope(st.Copy)))
		idx = append(idx, i)
	}
	if pipe == nil {
		return
	}
	err := redisconn.ExecPipe(ctx, pipe)
	for j, c := range cmds {
		i := idx[j]
		if cerr := redisconn.FirstErr(c.Err(), err); cerr != nil {
			se.Add(redisconn.Fault(i, "lpush", deadLetterKey(batch[i]), cerr, s.secrets...))
			toks[i] = nil // its LREM waits for the resend
			continue
		}
		toks[i].copied = true
	}
}

// writeCopy LPUSHes a simple list's retry copy onto the list, or its dead letter onto the
// dead-letter list.
func (s *Source) writeCopy(ctx context.Context, p redis.Pipeliner, st engine.Settlement) redis.Cmder {
	key := s.opts.Key
	if st.Action == engine.ActDeadLetter {
		key = deadLetterKey(st)
	}
	return p.LPush(ctx, key, codec.EncodeEnvelope(st.Copy))
}

// settledFlag is a simple list delivery's settled flag (redisconn.CopySettler).
func settledFlag(d *engine.Delivery) (*bool, error) {
	t, err := tokenOf(d)
	if err != nil {
		return nil, err
	}
	return &t.done, nil
}

// Requeue LPUSHes runtime copies (held retry_after copies that came due) onto the list, in one
// command: the first of msgs is read first. One command is all or nothing, so a failure names
// every copy.
func (s *Source) Requeue(ctx context.Context, msgs []*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	vals := make([]any, len(msgs))
	for i, m := range msgs {
		vals[i] = codec.EncodeEnvelope(m)
	}
	err := s.client.LPush(ctx, s.opts.Key, vals...).Err()
	if err == nil {
		return nil
	}
	var se engine.SettleError
	for i := range msgs {
		se.Add(redisconn.Fault(i, "lpush", s.opts.Key, err, s.secrets...))
	}
	return se.Err()
}

// Release forgets a delivery whose settlement the engine abandoned: its element stays in the
// processing list, and the next sweep (or start) returns it to the list.
func (s *Source) Release(st engine.Settlement) {
	if t, err := tokenOf(st.Delivery); err == nil {
		s.uncount(t)
	}
}

var _ engine.Releaser = (*Source)(nil)

// copyKey is where a settlement's copy goes: the list, the dead-letter list or the delay queue.
func (s *Source) copyKey(st engine.Settlement) string {
	switch st.Action {
	case engine.ActDeadLetter:
		return deadLetterKey(st)
	case engine.ActDelay:
		return s.opts.DelayKey
	}
	return s.opts.Key
}

func deadLetterKey(st engine.Settlement) string {
	if st.DeadLetterKey != "" {
		return st.DeadLetterKey
	}
	return st.Copy.Key
}

// tokenOf returns a delivery's token. A bare string token (a delivery built outside this package)
// is accepted as the element's bytes.
func tokenOf(d *engine.Delivery) (*token, error) {
	if d == nil {
		return nil, errors.New("redislist: settlement without a delivery")
	}
	switch t := d.Token.(type) {
	case *token:
		return t, nil
	case string:
		return &token{elem: t}, nil
	case []byte:
		return &token{elem: string(t)}, nil
	}
	return nil, fmt.Errorf("redislist: delivery token %T is not a list element", d.Token)
}
