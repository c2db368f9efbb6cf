package redispubsub

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// Settle executes a batch of settlements, pipelined (redisconn.CopySettler, which the simple
// list shares): ActAck does nothing; ActRequeue PUBLISHes the copy to its channel (RetryTo under
// patterns); ActDeadLetter XADDs the copy to the dead-letter stream. Each delivery's copy is
// written at most once, however often the engine resends it; a failure is reported per delivery
// (engine.SettleError) with its command and key. ActLeave and ActDelay are
// engine.ErrUnsupported (permanent faults).
func (s *Source) Settle(ctx context.Context, batch []engine.Settlement) error {
	return redisconn.CopySettler{Client: s.client, Name: "redispubsub", Done: settledFlag, Write: s.writeCopy}.Settle(ctx, batch)
}

// writeCopy publishes a retry copy, or XADDs a dead letter to its stream.
func (s *Source) writeCopy(ctx context.Context, p redis.Pipeliner, st engine.Settlement) redis.Cmder {
	if st.Action == engine.ActDeadLetter {
		key := st.DeadLetterKey
		if key == "" {
			key = st.Copy.Key
		}
		return p.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: codec.StreamFields(st.Copy)})
	}
	ch := s.retryChannel(st.Copy)
	if ch == "" {
		// Config requires retry_to wherever a pattern pipeline can retry; this is a safety net,
		// and an error here would only block the settlements behind it.
		s.log.Error().Str(engine.FieldKey, st.Copy.Key).Msg("retry copy not published: pattern subscription without retry_to")
		return nil
	}
	return p.Publish(ctx, ch, codec.EncodeEnvelope(st.Copy))
}

// settledFlag is a delivery's settled flag (redisconn.CopySettler). A delivery built elsewhere
// gets a token of its own.
func settledFlag(d *engine.Delivery) (*bool, error) {
	t, _ := d.Token.(*token)
	if t == nil {
		t = &token{channel: d.Key}
		d.Token = t
	}
	return &t.done, nil
}

// Requeue PUBLISHes runtime copies (held retry_after copies that came due), pipelined; a copy
// that failed is named in an engine.SettleError, the others are published and not sent again.
func (s *Source) Requeue(ctx context.Context, msgs []*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	pipe := s.client.Pipeline()
	var (
		cmds []*redis.IntCmd
		idx  []int
	)
	for i, m := range msgs {
		ch := s.retryChannel(m)
		if ch == "" {
			s.log.Error().Str(engine.FieldKey, m.Key).Msg("delayed copy not published: pattern subscription without retry_to")
			continue
		}
		cmds, idx = append(cmds, pipe.Publish(ctx, ch, codec.EncodeEnvelope(m))), append(idx, i)
	}
	if len(cmds) == 0 {
		return nil
	}
	err := redisconn.ExecPipe(ctx, pipe)
	var se engine.SettleError
	for j, c := range cmds {
		cerr := c.Err()
		if cerr == nil {
			cerr = err
		}
		if cerr != nil {
			se.Add(redisconn.Fault(idx[j], "publish", fmt.Sprint(c.Args()[1]), cerr, s.secrets...))
		}
	}
	return se.Err()
}

// retryChannel is where a copy of m goes: RetryTo under patterns, else m's own channel.
func (s *Source) retryChannel(m *engine.Message) string {
	if len(s.opts.Patterns) > 0 {
		return s.opts.RetryTo
	}
	return m.Key
}
