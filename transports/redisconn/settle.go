package redisconn

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
)

// CopyWriter adds to p the command that writes st's copy (st.Action is ActRequeue or
// ActDeadLetter) and returns it; nil when the copy has nowhere to go (the writer logs why), and
// the delivery counts as settled.
type CopyWriter func(ctx context.Context, p redis.Pipeliner, st engine.Settlement) redis.Cmder

// CopySettler is the settle loop of the Redis sources without acknowledgement (a simple list,
// Pub/Sub; SPEC §4's last column): ActAck settles nothing; ActRequeue and ActDeadLetter write the
// copy with Write, every copy of the batch in one pipeline. A failure is named per delivery
// (engine.SettleError) with its command, key and Redis's own error, passwords redacted; the
// others are settled. ActLeave, ActDelay and a missing copy are permanent faults
// (engine.ErrUnsupported, engine.ErrPermanent).
type CopySettler struct {
	Client redis.UniversalClient
	Name   string // the transport, for errors ("redislist")
	Key    string // the source's key, named by a fault of a settlement it cannot carry out
	// Done gives a delivery's settled flag, kept on its token so that a batch the engine sends
	// again writes no copy twice, or an error for a delivery that is not this source's.
	Done  func(d *engine.Delivery) (*bool, error)
	Write CopyWriter
}

// Settle carries out batch.
func (c CopySettler) Settle(ctx context.Context, batch []engine.Settlement) error {
	var (
		se    engine.SettleError
		pipe  redis.Pipeliner
		cmds  []redis.Cmder
		idx   []int
		flags []*bool
	)
	for i, st := range batch {
		var (
			flag *bool
			err  error
		)
		switch {
		case st.Delivery == nil:
			err = fmt.Errorf("%s: settlement without a delivery: %w", c.Name, engine.ErrPermanent)
		case st.Action != engine.ActAck && st.Action != engine.ActRequeue && st.Action != engine.ActDeadLetter:
			err = fmt.Errorf("%s: settle %s: %w", c.Name, st.Action, engine.ErrUnsupported)
		case st.Action != engine.ActAck && st.Copy == nil:
			err = fmt.Errorf("%s: settle %s without a copy: %w", c.Name, st.Action, engine.ErrPermanent)
		default:
			flag, err = c.Done(st.Delivery)
			if err != nil {
				err = fmt.Errorf("%s: %w: %w", c.Name, err, engine.ErrPermanent)
			}
		}
		if err != nil {
			se.Add(Fault(i, "settle", c.Key, err))
			continue
		}
		if *flag {
			continue // settled by an earlier call the engine is resending
		}
		if st.Action == engine.ActAck {
			*flag = true // nothing to settle
			continue
		}
		if pipe == nil {
			pipe = c.Client.Pipeline()
		}
		cmd := c.Write(ctx, pipe, st)
		if cmd == nil {
			*flag = true
			continue
		}
		cmds, idx, flags = append(cmds, cmd), append(idx, i), append(flags, flag)
	}
	if len(cmds) == 0 {
		return se.Err()
	}
	err := ExecPipe(ctx, pipe)
	secrets := SecretsOf(c.Client)
	for j, cmd := range cmds {
		cerr := cmd.Err()
		if cerr == nil {
			cerr = err
		}
		if cerr != nil {
			se.Add(Fault(idx[j], cmd.Name(), fmt.Sprint(cmd.Args()[1]), cerr, secrets...))
			continue
		}
		*flags[j] = true
	}
	return se.Err()
}
