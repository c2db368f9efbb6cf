package redisstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// SettleError is returned by Settle when some settlements were not carried out. Failed holds
// their indexes in the batch; the others are done and must not be sent again (a copy would be
// written twice). Failed deliveries stay tracked, so a re-sent settlement finds them.
type SettleError struct {
	Failed []int
	Err    error
}

func (e *SettleError) Error() string {
	return fmt.Sprintf("redisstream: %d settlements failed: %v", len(e.Failed), e.Err)
}

func (e *SettleError) Unwrap() error { return e.Err }

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

// Settle carries out a batch (SPEC §4), sent on the pool, never on the reading connection:
//
//   - ActAck: one XACK for every acknowledged id of the batch.
//   - ActRequeue, ActDeadLetter: XADD the copy to the stream or the dead-letter stream, then
//     XACK the original.
//   - ActDelay: ZADD delay_key (score: due time in unix ms) the encoded copy, then XACK.
//   - ActLeave: nothing is sent; the entry stays pending, kept from looking idle until
//     HoldUntil (claiming, reclaim).
//
// Copies whose key shares the stream's slot (all of them outside a cluster) go with the batch's
// one XACK in a single MULTI/EXEC, so a crash leaves neither a loss nor a duplicate. A copy to a
// key in another cluster slot is written first, and its original acknowledged only once the
// write succeeded. A destination key found holding another type fails its settlement without
// acknowledging, since inside MULTI/EXEC the XACK would run even though the XADD failed.
func (s *Source) Settle(ctx context.Context, batch []engine.Settlement) error {
	if len(batch) == 0 {
		return nil
	}
	var (
		acks   []string // ids to XACK in the final command
		ackIdx []int    // their batch indexes (for failure reporting)
		local  []copyOp // copies in one slot with the stream
		remote []copyOp // copies to other slots (cluster)
		failed []int
		errs   []error
	)
	fail := func(i int, err error) {
		failed = append(failed, i)
		errs = append(errs, err)
	}
	now := time.Now()
	for i := range batch {
		st := &batch[i]
		if st.Delivery == nil {
			fail(i, errors.New("settlement without a delivery"))
			continue
		}
		id := tokenID(st.Delivery)
		var op copyOp
		switch st.Action {
		case engine.ActAck:
			acks, ackIdx = append(acks, id), append(ackIdx, i)
			continue
		case engine.ActLeave:
			continue // handled after the commands succeed
		case engine.ActRequeue:
			op = copyOp{key: s.o.Stream}
		case engine.ActDeadLetter:
			if st.DeadLetterKey == "" {
				fail(i, fmt.Errorf("dead letter for %s: no dead-letter key", id))
				continue
			}
			op = copyOp{key: st.DeadLetterKey}
		case engine.ActDelay:
			if !s.durable {
				fail(i, fmt.Errorf("delay %s: durable delays are off (delayed_retry = %q): %w",
					id, s.o.DelayedRetry, engine.ErrUnsupported))
				continue
			}
			op = copyOp{key: s.o.DelayKey, zset: true}
		default:
			fail(i, fmt.Errorf("settle %s: unknown action %d", id, st.Action))
			continue
		}
		if st.Copy == nil {
			fail(i, fmt.Errorf("%s %s: no copy to write", st.Action, id))
			continue
		}
		op.idx, op.id = i, id
		if op.zset {
			op.member = encodeDelayed(s.o.Stream, id, st.Copy)
			op.score = float64(st.Due.UnixMilli())
		} else {
			op.fields = Fields(st.Copy)
		}
		if s.sameSlot(op.key) {
			local = append(local, op)
		} else {
			remote = append(remote, op)
		}
	}

	local, remote, failed, errs = s.checkKeyTypes(ctx, local, remote, failed, errs)

	// Copies on other slots first; an original is acknowledged only after its copy is written.
	if len(remote) > 0 {
		cmds, _ := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, op := range remote {
				addCopy(ctx, p, op)
			}
			return nil
		})
		for j, op := range remote {
			if err := cmdErr(cmds, j); err != nil {
				fail(op.idx, fmt.Errorf("write copy of %s to %s: %w", op.id, op.key, err))
				continue
			}
			acks, ackIdx = append(acks, op.id), append(ackIdx, op.idx)
		}
	}

	for _, op := range local {
		acks, ackIdx = append(acks, op.id), append(ackIdx, op.idx)
	}
	var done []int
	switch {
	case len(local) > 0:
		cmds, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, op := range local {
				addCopy(ctx, p, op)
			}
			p.XAck(ctx, s.o.Stream, s.o.Group, acks...)
			return nil
		})
		ackErr := cmdErr(cmds, len(local))
		if ackErr == nil && err != nil && len(cmds) == 0 {
			ackErr = err
		}
		if ackErr != nil {
			for _, i := range ackIdx {
				fail(i, fmt.Errorf("xack %s: %w", s.o.Stream, ackErr))
			}
			break
		}
		done = ackIdx
		for j, op := range local {
			if err := cmdErr(cmds, j); err != nil {
				// Only a type change since checkKeyTypes gets here; the XACK already ran.
				s.log.Error().Err(err).Str("id", op.id).Str("to", op.key).
					Msg("copy failed after its original was acknowledged")
				fail(op.idx, fmt.Errorf("write copy of %s to %s: %w", op.id, op.key, err))
			}
		}
	case len(acks) > 0:
		if err := s.c.XAck(ctx, s.o.Stream, s.o.Group, acks...).Err(); err != nil {
			for _, i := range ackIdx {
				fail(i, fmt.Errorf("xack %s: %w", s.o.Stream, err))
			}
			break
		}
		done = ackIdx
	}

	// Untrack what is settled; a failed settlement stays tracked for its retry.
	ids := make([]string, 0, len(done))
	for _, i := range done {
		ids = append(ids, tokenID(batch[i].Delivery))
		if batch[i].Action == engine.ActDelay {
			s.lowerNextDue(batch[i].Due.UnixMilli())
		}
	}
	s.track.remove(ids)
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
	if len(failed) > 0 {
		return &SettleError{Failed: dedupe(failed), Err: errors.Join(errs...)}
	}
	return nil
}

func addCopy(ctx context.Context, p redis.Pipeliner, op copyOp) {
	if op.zset {
		p.ZAdd(ctx, op.key, redis.Z{Score: op.score, Member: op.member})
		return
	}
	p.XAdd(ctx, &redis.XAddArgs{Stream: op.key, ID: "*", Values: op.fields})
}

func cmdErr(cmds []redis.Cmder, i int) error {
	if i >= len(cmds) {
		return errors.New("no reply")
	}
	return cmds[i].Err()
}

func (s *Source) sameSlot(key string) bool {
	return key == s.o.Stream || key == s.o.DelayKey || redisconn.SameSlot(s.c, s.o.Stream, key)
}

// checkKeyTypes makes sure every copy destination holds the right type (or nothing) before a
// MULTI/EXEC would acknowledge an original whose copy cannot be written. A key seen with the
// right type is remembered, so this costs one pipelined TYPE per new key.
func (s *Source) checkKeyTypes(ctx context.Context, local, remote []copyOp, failed []int, errs []error) ([]copyOp, []copyOp, []int, []error) {
	want := map[string]string{}
	for _, ops := range [][]copyOp{local, remote} {
		for _, op := range ops {
			t := "stream"
			if op.zset {
				t = "zset"
			}
			if op.key == s.o.Stream {
				continue // the stream being read is a stream
			}
			if _, ok := s.keyTypes.Load(op.key); !ok {
				want[op.key] = t
			}
		}
	}
	if len(want) == 0 {
		return local, remote, failed, errs
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	cmds, _ := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Type(ctx, k)
		}
		return nil
	})
	bad := map[string]error{}
	for i, k := range keys {
		var got string
		err := cmdErr(cmds, i)
		if err == nil {
			if sc, ok := cmds[i].(*redis.StatusCmd); ok {
				got = sc.Val()
			}
		}
		switch {
		case err != nil:
			bad[k] = fmt.Errorf("type %s: %w", k, err)
		case got == want[k]:
			s.keyTypes.Store(k, got)
		case got != "none":
			bad[k] = fmt.Errorf("key %s holds a %s, not a %s: nothing written, original left pending", k, got, want[k])
		}
	}
	if len(bad) == 0 {
		return local, remote, failed, errs
	}
	filter := func(ops []copyOp) []copyOp {
		out := ops[:0]
		for _, op := range ops {
			if err := bad[op.key]; err != nil {
				failed, errs = append(failed, op.idx), append(errs, err)
				continue
			}
			out = append(out, op)
		}
		return out
	}
	return filter(local), filter(remote), failed, errs
}

// dedupe sorts xs and drops repeats.
func dedupe(xs []int) []int {
	slices.Sort(xs)
	return slices.Compact(xs)
}

// Requeue writes runtime copies (held retry_after copies that came due) back onto the stream,
// pipelined.
func (s *Source) Requeue(ctx context.Context, msgs []*engine.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	cmds, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, m := range msgs {
			p.XAdd(ctx, &redis.XAddArgs{Stream: s.o.Stream, ID: "*", Values: Fields(m)})
		}
		return nil
	})
	if err == nil {
		return nil
	}
	var errs []error
	for i, c := range cmds {
		if c.Err() != nil {
			errs = append(errs, fmt.Errorf("copy %d: %w", i, c.Err()))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, err)
	}
	return fmt.Errorf("redisstream: requeue to %s: %w", s.o.Stream, errors.Join(errs...))
}

// FailedIndexes implements engine.PartialError.
func (e *SettleError) FailedIndexes() []int { return e.Failed }

var _ engine.PartialError = (*SettleError)(nil)
