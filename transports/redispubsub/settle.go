package redispubsub

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// payloadField is the stream field that holds a dead letter's payload; every other field is a
// header (the stream entry mapping of SPEC §3).
const payloadField = "payload"

// Settle executes a batch of settlements, pipelined: ActAck does nothing; ActRequeue PUBLISHes
// the copy to its channel (RetryTo under patterns); ActDeadLetter XADDs the copy to the
// dead-letter stream. ActLeave and ActDelay are engine.ErrUnsupported, and the batch is refused
// before any command.
func (s *Source) Settle(ctx context.Context, batch []engine.Settlement) error {
	toks := make([]*token, len(batch))
	for i, st := range batch {
		switch st.Action {
		case engine.ActAck, engine.ActRequeue, engine.ActDeadLetter:
		default:
			return fmt.Errorf("redispubsub: settle %s: %w", st.Action, engine.ErrUnsupported)
		}
		if st.Action != engine.ActAck && st.Copy == nil {
			return fmt.Errorf("redispubsub: settle %s without a copy", st.Action)
		}
		if st.Delivery == nil {
			return errors.New("redispubsub: settlement without a delivery")
		}
		t, _ := st.Delivery.Token.(*token)
		if t == nil {
			t = &token{channel: st.Delivery.Key} // a delivery built elsewhere
		}
		toks[i] = t
	}

	var (
		pipe redis.Pipeliner
		cmds []redis.Cmder
		who  []*token
	)
	for i, st := range batch {
		t := toks[i]
		if t.done {
			continue
		}
		var cmd redis.Cmder
		switch st.Action {
		case engine.ActAck:
			t.done = true // nothing to settle
			continue
		case engine.ActRequeue:
			ch := s.retryChannel(st.Copy)
			if ch == "" {
				// Config requires retry_to wherever a pattern pipeline can retry; this is a
				// safety net, and an error here would only block the settlements behind it.
				s.log.Error().Str(engine.FieldKey, st.Copy.Key).Msg("retry copy not published: pattern subscription without retry_to")
				t.done = true
				continue
			}
			if pipe == nil {
				pipe = s.client.Pipeline()
			}
			cmd = pipe.Publish(ctx, ch, codec.EncodeEnvelope(st.Copy))
		case engine.ActDeadLetter:
			key := st.DeadLetterKey
			if key == "" {
				key = st.Copy.Key
			}
			if pipe == nil {
				pipe = s.client.Pipeline()
			}
			cmd = pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: StreamValues(st.Copy)})
		}
		cmds = append(cmds, cmd)
		who = append(who, t)
	}
	if pipe == nil {
		return nil
	}
	if err := redisconn.ExecPipe(ctx, pipe); err != nil {
		return redisconn.RedactError(fmt.Errorf("redispubsub: settle: %w", err), s.secrets...)
	}
	if errs := redisconn.CmdErrors(cmds, func(i int) { who[i].done = true }); len(errs) > 0 {
		return redisconn.RedactError(fmt.Errorf("redispubsub: settle %d of %d: %w", len(errs), len(cmds), errors.Join(errs...)), s.secrets...)
	}
	return nil
}

// Requeue PUBLISHes runtime copies (held retry_after copies that came due), pipelined.
func (s *Source) Requeue(ctx context.Context, msgs []*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pipe := s.client.Pipeline()
	var cmds []*redis.IntCmd
	for _, m := range msgs {
		ch := s.retryChannel(m)
		if ch == "" {
			s.log.Error().Str(engine.FieldKey, m.Key).Msg("delayed copy not published: pattern subscription without retry_to")
			continue
		}
		cmds = append(cmds, pipe.Publish(ctx, ch, codec.EncodeEnvelope(m)))
	}
	if len(cmds) == 0 {
		return nil
	}
	if err := redisconn.ExecPipe(ctx, pipe); err != nil {
		return redisconn.RedactError(fmt.Errorf("redispubsub: publish: %w", err), s.secrets...)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return redisconn.RedactError(fmt.Errorf("redispubsub: publish: %w", err), s.secrets...)
		}
	}
	return nil
}

// retryChannel is where a copy of m goes: RetryTo under patterns, else m's own channel.
func (s *Source) retryChannel(m *engine.Message) string {
	if len(s.opts.Patterns) > 0 {
		return s.opts.RetryTo
	}
	return m.Key
}

// StreamValues maps a message to stream entry fields: its headers, in name order, then the
// field "payload" holding the payload. A header named "payload" cannot be represented and is
// left out.
func StreamValues(m *engine.Message) []any {
	names := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		if k != payloadField {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	vals := make([]any, 0, 2*len(names)+2)
	for _, k := range names {
		vals = append(vals, k, m.Headers[k])
	}
	return append(vals, payloadField, m.Payload)
}
