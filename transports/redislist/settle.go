package redislist

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// op is one settlement's commands inside the settling pipeline.
type op struct {
	tok  *token
	push *redis.IntCmd // the copy's LPUSH, when it goes in this pipeline
	rem  *redis.IntCmd // reliable: LREM processing 1 element
}

// Settle executes a batch of settlements.
//
// Reliable list, per delivery: ActAck → LREM processing 1 element; ActRequeue → LPUSH key copy,
// then the LREM; ActDeadLetter → LPUSH dead-letter list copy, then the LREM. All of a batch
// whose keys share the processing list's slot goes in one MULTI/EXEC (on a standalone server
// that is everything); a dead letter on another slot is written first, in its own pipeline.
//
// Simple list: ActAck does nothing; ActRequeue and ActDeadLetter LPUSH the copy (pipelined).
//
// ActLeave and ActDelay are engine.ErrUnsupported, and the batch is refused before any command.
func (s *Source) Settle(ctx context.Context, batch []engine.Settlement) error {
	toks := make([]*token, len(batch))
	for i, st := range batch {
		switch st.Action {
		case engine.ActAck, engine.ActRequeue, engine.ActDeadLetter:
		default:
			return fmt.Errorf("redislist: settle %s: %w", st.Action, engine.ErrUnsupported)
		}
		if st.Action != engine.ActAck && st.Copy == nil {
			return fmt.Errorf("redislist: settle %s without a copy", st.Action)
		}
		t, err := tokenOf(st.Delivery)
		if err != nil {
			return err
		}
		toks[i] = t
	}
	if !s.opts.Reliable {
		return s.settleSimple(ctx, batch, toks)
	}

	// Dead letters on another slot cannot share the MULTI: write them first.
	if err := s.writeStrayCopies(ctx, batch, toks); err != nil {
		return err
	}

	pipe := s.client.TxPipeline()
	ops := make([]op, 0, len(batch))
	for i, st := range batch {
		t := toks[i]
		if t.done {
			continue // settled by an earlier call the engine is retrying
		}
		o := op{tok: t}
		switch st.Action {
		case engine.ActRequeue:
			o.push = pipe.LPush(ctx, s.opts.Key, codec.EncodeEnvelope(st.Copy))
		case engine.ActDeadLetter:
			if !t.copied {
				o.push = pipe.LPush(ctx, deadLetterKey(st), codec.EncodeEnvelope(st.Copy))
			}
		}
		o.rem = pipe.LRem(ctx, s.opts.Processing, 1, t.elem)
		ops = append(ops, o)
	}
	if len(ops) == 0 {
		return nil
	}
	if err := redisconn.ExecPipe(ctx, pipe); err != nil {
		return redisconn.RedactError(fmt.Errorf("redislist: settle: %w", err), s.secrets...)
	}

	var errs []error
	for _, o := range ops {
		if o.push != nil && o.push.Err() != nil {
			// A runtime error inside MULTI (WRONGTYPE: the dead-letter key is not a list) does not
			// stop the LREM queued after it. Put the element back so it is not lost.
			if o.rem.Err() == nil && o.rem.Val() > 0 {
				s.restore(ctx, o.tok.elem)
			}
			errs = append(errs, o.push.Err())
			continue
		}
		if err := o.rem.Err(); err != nil {
			errs = append(errs, err)
			continue
		}
		o.tok.done = true
		s.uncount(o.tok)
	}
	if len(errs) > 0 {
		return redisconn.RedactError(fmt.Errorf("redislist: settle %d of %d: %w", len(errs), len(ops), errors.Join(errs...)), s.secrets...)
	}
	return nil
}

// writeStrayCopies LPUSHes the dead letters whose list is not on the processing list's slot.
func (s *Source) writeStrayCopies(ctx context.Context, batch []engine.Settlement, toks []*token) error {
	var (
		pipe redis.Pipeliner
		cmds []*redis.IntCmd
		who  []*token
	)
	for i, st := range batch {
		t := toks[i]
		if st.Action != engine.ActDeadLetter || t.done || t.copied ||
			redisconn.SameSlot(s.client, deadLetterKey(st), s.opts.Processing) {
			continue
		}
		if pipe == nil {
			pipe = s.client.Pipeline()
		}
		cmds = append(cmds, pipe.LPush(ctx, deadLetterKey(st), codec.EncodeEnvelope(st.Copy)))
		who = append(who, t)
	}
	if pipe == nil {
		return nil
	}
	if err := redisconn.ExecPipe(ctx, pipe); err != nil {
		return redisconn.RedactError(fmt.Errorf("redislist: write dead letters: %w", err), s.secrets...)
	}
	if errs := redisconn.CmdErrors(cmds, func(i int) { who[i].copied = true }); len(errs) > 0 {
		return redisconn.RedactError(fmt.Errorf("redislist: write dead letters: %w", errors.Join(errs...)), s.secrets...)
	}
	return nil
}

// restore puts an element back into the processing list after its LREM ran but its copy failed.
func (s *Source) restore(ctx context.Context, elem string) {
	if err := s.client.LPush(ctx, s.opts.Processing, elem).Err(); err != nil {
		s.log.Error().Str("error", redisconn.Redact(err.Error(), s.secrets...)).
			Msg("element lost: its copy could not be written and it could not be put back")
	}
}

func (s *Source) settleSimple(ctx context.Context, batch []engine.Settlement, toks []*token) error {
	var (
		pipe redis.Pipeliner
		cmds []*redis.IntCmd
		who  []*token
	)
	for i, st := range batch {
		t := toks[i]
		if t.done {
			continue
		}
		var key string
		switch st.Action {
		case engine.ActAck:
			t.done = true // nothing to settle
			continue
		case engine.ActRequeue:
			key = s.opts.Key
		case engine.ActDeadLetter:
			key = deadLetterKey(st)
		}
		if pipe == nil {
			pipe = s.client.Pipeline()
		}
		cmds = append(cmds, pipe.LPush(ctx, key, codec.EncodeEnvelope(st.Copy)))
		who = append(who, t)
	}
	if pipe == nil {
		return nil
	}
	if err := redisconn.ExecPipe(ctx, pipe); err != nil {
		return redisconn.RedactError(fmt.Errorf("redislist: settle: %w", err), s.secrets...)
	}
	if errs := redisconn.CmdErrors(cmds, func(i int) { who[i].done = true }); len(errs) > 0 {
		return redisconn.RedactError(fmt.Errorf("redislist: settle %d of %d: %w", len(errs), len(cmds), errors.Join(errs...)), s.secrets...)
	}
	return nil
}

// Requeue LPUSHes runtime copies (held retry_after copies that came due) onto the list, in one
// command: the first of msgs is read first.
func (s *Source) Requeue(ctx context.Context, msgs []*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	vals := make([]any, len(msgs))
	for i, m := range msgs {
		vals[i] = codec.EncodeEnvelope(m)
	}
	if err := s.client.LPush(ctx, s.opts.Key, vals...).Err(); err != nil {
		return redisconn.RedactError(fmt.Errorf("redislist: lpush %s: %w", s.opts.Key, err), s.secrets...)
	}
	return nil
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
