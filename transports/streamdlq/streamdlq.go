// Package streamdlq holds the tools for dead letters kept in a Redis stream: read, page, scan
// with a filter, purge and redrive. Every source whose dead letters are stream entries (the
// stream, claiming and reclaim kinds, and Pub/Sub, SPEC §5) uses them, so that no transport
// package imports another. They speak the stream sources' wire format (codec.StreamFields,
// codec.DecodeStream).
//
// The error texts begin "redisstream:", as the stream source's own do: they are stream commands
// (XRANGE, XADD, XDEL) failing, whichever source kind keeps its dead letters in a stream.
package streamdlq

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// DeadLetter is one entry of a dead-letter stream. Message.Key is the dead-letter stream and
// Message.ID the entry's id; its headers carry x-dead-letter-reason and the rest (SPEC §5).
type DeadLetter struct {
	Message *engine.Message
}

// ReadDeadLetters returns up to count entries of the dead-letter stream key, oldest first
// (count <= 0: all of them). A missing key has none.
func ReadDeadLetters(ctx context.Context, c redis.UniversalClient, key string, count int) ([]DeadLetter, error) {
	var (
		xs  []redis.XMessage
		err error
	)
	if count > 0 {
		xs, err = c.XRangeN(ctx, key, "-", "+", int64(count)).Result()
	} else {
		xs, err = c.XRange(ctx, key, "-", "+").Result()
	}
	if err != nil {
		return nil, fmt.Errorf("redisstream: xrange %s: %w", key, err)
	}
	return deadLetters(key, xs), nil
}

func deadLetters(key string, xs []redis.XMessage) []DeadLetter {
	out := make([]DeadLetter, len(xs))
	for i, x := range xs {
		m := &engine.Message{Key: key, ID: x.ID}
		codec.DecodeStream(m, x.Values)
		out[i] = DeadLetter{Message: m}
	}
	return out
}

// redriveHeaders are the headers a redrive removes: the dead letter's own, and the retry and
// delivery counts, so the message starts over as attempt 1 (SPEC §1 "retry count reset").
var redriveHeaders = []string{
	engine.HeaderDeadLetterReason, engine.HeaderOriginalKey, engine.HeaderOriginalID,
	engine.HeaderAttempts, engine.HeaderFailedAt,
	engine.HeaderRetryCount, engine.HeaderDeliveryCount, engine.HeaderIdleMS,
}

// RedriveCopy returns what a redrive writes back for the dead letter m: its key, headers and
// payload, without the dead-letter, retry-count and delivery headers, and without an id.
func RedriveCopy(m *engine.Message) *engine.Message {
	c := m.Clone()
	c.ID = ""
	for _, h := range redriveHeaders {
		delete(c.Headers, h)
	}
	return c
}

// redrivePage is how many dead letters one round trip moves.
const redrivePage = 100

// redriveScript moves one dead letter KEYS[1]/ARGV[1] onto the stream KEYS[2] as a new entry with
// the fields ARGV[2..]. A script rather than MULTI/EXEC: a command that fails inside MULTI
// (WRONGTYPE) does not stop the ones after it, and the XDEL would delete a letter whose copy was
// never written; here a failing XADD raises and nothing after it runs. An entry already gone (a
// concurrent redrive) is skipped, so it is not copied twice. Returns 1 moved, 0 gone.
var redriveScript = redis.NewScript(`
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return 0 end
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
redis.call('XDEL', KEYS[1], ARGV[1])
return 1
`)

// Redrive moves up to limit dead letters (limit <= 0: every one there when it starts; letters
// dead-lettered meanwhile wait for the next redrive), oldest first, from the dead-letter stream
// dlq to the stream target as new entries, with RedriveCopy's headers. Each copy is written
// before its letter is deleted: atomically (one script per letter, pipelined) when both keys
// hash to one slot, else in that order, so a crash leaves a duplicate, never a loss. It returns
// how many it moved, also on error. match selects the letters to move (nil: every one); the
// others stay, in order.
func Redrive(ctx context.Context, c redis.UniversalClient, dlq, target string, limit int, match Match) (int, error) {
	if dlq == target {
		return 0, fmt.Errorf("redisstream: redrive: dead-letter stream and target are both %q", dlq)
	}
	if !redisconn.SameSlot(c, dlq, target) {
		return RedriveWith(ctx, c, dlq, limit, match, func(ctx context.Context, batch []DeadLetter) (int, error) {
			return writeCopies(ctx, c, target, batch)
		})
	}
	if err := redriveScript.Load(ctx, c).Err(); err != nil {
		return 0, fmt.Errorf("redisstream: redrive: load script: %w", err)
	}
	return redriveLoop(ctx, c, dlq, limit, match, func(ctx context.Context, batch []DeadLetter) (int, error) {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, dl := range batch {
			f := codec.StreamFields(RedriveCopy(dl.Message))
			args := make([]any, 0, 1+len(f))
			args = append(args, dl.Message.ID)
			for _, s := range f {
				args = append(args, s)
			}
			cmds[i] = redriveScript.EvalSha(ctx, pipe, []string{dlq, target}, args...)
		}
		_, _ = pipe.Exec(ctx) // each command's own error is read below
		moved := 0
		for _, cmd := range cmds {
			n, err := cmd.Int()
			if err != nil {
				return moved, fmt.Errorf("redisstream: redrive to %s: %w", target, err)
			}
			moved += n
		}
		return moved, nil
	})
}

// writeCopies XADDs the copies of batch to target, pipelined, and returns how many of the
// leading ones were written.
func writeCopies(ctx context.Context, c redis.UniversalClient, target string, batch []DeadLetter) (int, error) {
	pipe := c.Pipeline()
	cmds := make([]*redis.StringCmd, len(batch))
	for i, dl := range batch {
		cmds[i] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: target, Values: codec.StreamFields(RedriveCopy(dl.Message))})
	}
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return i, fmt.Errorf("redisstream: redrive: xadd %s: %w", target, err)
		}
	}
	return len(batch), nil
}

// RedriveWith moves dead letters out of the stream dlq with a caller's write step: write gets
// the next batch, oldest first, writes copies wherever they belong (RedriveCopy gives their
// content) and returns how many of the leading letters it wrote; those are then deleted with
// XDEL. It stops at the first error, or when write wrote fewer than it was given. limit is as
// and match for Redrive. It returns how many letters it moved, also on error.
func RedriveWith(ctx context.Context, c redis.UniversalClient, dlq string, limit int, match Match, write func(ctx context.Context, batch []DeadLetter) (int, error)) (int, error) {
	return redriveLoop(ctx, c, dlq, limit, match, func(ctx context.Context, batch []DeadLetter) (int, error) {
		wrote, werr := write(ctx, batch)
		wrote = min(max(wrote, 0), len(batch))
		if wrote > 0 {
			ids := make([]string, wrote)
			for i := range wrote {
				ids[i] = batch[i].Message.ID
			}
			if err := c.XDel(ctx, dlq, ids...).Err(); err != nil {
				return 0, fmt.Errorf("redisstream: redrive: xdel %s (%d copies already written): %w", dlq, wrote, err)
			}
		}
		if werr == nil && wrote < len(batch) {
			werr = fmt.Errorf("redisstream: redrive: %d of %d dead letters written", wrote, len(batch))
		}
		return wrote, werr
	})
}

// Match selects dead letters for Redrive, RedriveWith and Purge; nil selects every one.
type Match func(*engine.Message) (bool, error)

// selected returns the letters of batch that match selects, at most max (max <= 0: all).
func selected(batch []DeadLetter, match Match, max int) ([]DeadLetter, error) {
	out := batch[:0:0]
	for _, dl := range batch {
		if max > 0 && len(out) == max {
			break
		}
		if match != nil {
			ok, err := match(dl.Message)
			if err != nil {
				return out, fmt.Errorf("dead letter %s: %w", dl.Message.ID, err)
			}
			if !ok {
				continue
			}
		}
		out = append(out, dl)
	}
	return out, nil
}

// Purge deletes up to limit dead letters (limit <= 0: all there when it starts) that match
// selects (nil: every one) from the dead-letter stream dlq, oldest first, with XDEL, and returns
// how many it deleted, also on error.
func Purge(ctx context.Context, c redis.UniversalClient, dlq string, limit int, match Match) (int, error) {
	return redriveLoop(ctx, c, dlq, limit, match, func(ctx context.Context, batch []DeadLetter) (int, error) {
		ids := make([]string, len(batch))
		for i, dl := range batch {
			ids[i] = dl.Message.ID
		}
		n, err := c.XDel(ctx, dlq, ids...).Result()
		if err != nil {
			return 0, fmt.Errorf("redisstream: purge: xdel %s: %w", dlq, err)
		}
		return int(n), nil
	})
}

// Scan returns up to limit dead letters (0: all) of the stream key that match selects, oldest
// first, and how many match in all; it reads the whole stream page by page.
func Scan(ctx context.Context, c redis.UniversalClient, key string, limit int, match Match) ([]DeadLetter, int64, error) {
	var (
		out   []DeadLetter
		total int64
	)
	start := "-"
	for {
		xs, err := c.XRangeN(ctx, key, start, "+", redrivePage).Result()
		if err != nil {
			return out, total, fmt.Errorf("redisstream: xrange %s: %w", key, err)
		}
		if len(xs) == 0 {
			return out, total, nil
		}
		sel, err := selected(deadLetters(key, xs), match, 0)
		if err != nil {
			return out, total, err
		}
		total += int64(len(sel))
		if limit <= 0 || len(out) < limit {
			n := len(sel)
			if limit > 0 {
				n = min(n, limit-len(out))
			}
			out = append(out, sel[:n]...)
		}
		start = "(" + xs[len(xs)-1].ID
	}
}

// redriveLoop reads dlq page by page, oldest first, and hands the letters of each page that
// match selects to step, which moves (copies and deletes) or deletes them and returns how many
// it handled.
func redriveLoop(ctx context.Context, c redis.UniversalClient, dlq string, limit int, match Match, step func(ctx context.Context, batch []DeadLetter) (int, error)) (int, error) {
	// The newest id at the start bounds the run: a letter that fails again at once comes back
	// with a new id, and must not be moved round in a loop.
	last, err := c.XRevRangeN(ctx, dlq, "+", "-", 1).Result()
	if err != nil {
		return 0, fmt.Errorf("redisstream: redrive: xrevrange %s: %w", dlq, err)
	}
	if len(last) == 0 {
		return 0, nil
	}
	end := last[0].ID
	start := "-"
	moved := 0
	for limit <= 0 || moved < limit {
		n := redrivePage
		if limit > 0 {
			n = min(n, limit-moved)
		}
		xs, err := c.XRangeN(ctx, dlq, start, end, int64(n)).Result()
		if err != nil {
			return moved, fmt.Errorf("redisstream: redrive: xrange %s: %w", dlq, err)
		}
		if len(xs) == 0 {
			break
		}
		left := 0
		if limit > 0 {
			left = limit - moved
		}
		batch, err := selected(deadLetters(dlq, xs), match, left)
		if len(batch) > 0 {
			k, serr := step(ctx, batch)
			moved += k
			if serr != nil {
				return moved, serr
			}
		}
		if err != nil {
			return moved, err
		}
		if xs[len(xs)-1].ID == end {
			break
		}
		start = "(" + xs[len(xs)-1].ID
	}
	return moved, nil
}
