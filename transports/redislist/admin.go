package redislist

// Operator tools over a list source's keys, for flowrun dlq: reading dead letters and moving
// them back. A dead-letter list holds envelopes (codec), LPUSHed, so its oldest letter is at the
// tail.

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// DeadLetter is one element of a dead-letter list: Raw is the element exactly as stored (what
// LREM needs), Message its decoded envelope, with Key the dead-letter list.
type DeadLetter struct {
	Raw     string
	Message *engine.Message
}

// ReadDeadLetters returns up to count elements of the dead-letter list key, oldest (tail) first
// (count <= 0: all of them). A missing key has none.
func ReadDeadLetters(ctx context.Context, c redis.UniversalClient, key string, count int) ([]DeadLetter, error) {
	start := int64(0)
	if count > 0 {
		start = -int64(count)
	}
	els, err := c.LRange(ctx, key, start, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redislist: lrange %s: %w", key, err)
	}
	return deadLetters(key, els), nil
}

// deadLetters decodes elements read head to tail into letters oldest first.
func deadLetters(key string, els []string) []DeadLetter {
	out := make([]DeadLetter, len(els))
	for i, el := range els {
		m := &engine.Message{Key: key}
		_ = codec.DecodeEnvelopeInto([]byte(el), m) // a malformed letter is shown as its bytes
		out[len(els)-1-i] = DeadLetter{Raw: el, Message: m}
	}
	return out
}

// redriveHeaders are the headers a redrive removes: the dead letter's own and the retry count, so
// the message starts over as attempt 1 (SPEC §1 "retry count reset").
var redriveHeaders = []string{
	engine.HeaderDeadLetterReason, engine.HeaderOriginalKey, engine.HeaderOriginalID,
	engine.HeaderAttempts, engine.HeaderFailedAt,
	engine.HeaderRetryCount, engine.HeaderDeliveryCount, engine.HeaderIdleMS,
}

// RedriveCopy returns what a redrive pushes back for the dead letter m: its envelope without the
// dead-letter and retry-count headers (the bare payload when no header is left).
func RedriveCopy(m *engine.Message) []byte {
	c := m.Clone()
	for _, h := range redriveHeaders {
		delete(c.Headers, h)
	}
	return codec.EncodeEnvelope(c)
}

// redrivePage is how many dead letters one round trip moves.
const redrivePage = 100

// redriveScript moves the dead letter ARGV[1] of the list KEYS[1] to the list KEYS[2] as ARGV[2].
// A script rather than MULTI/EXEC: a command that fails inside MULTI (WRONGTYPE) does not stop
// the ones after it, and the LREM would delete a letter whose copy was never pushed; here a
// failing LPUSH raises and nothing after it runs. A letter already gone (a concurrent redrive)
// is skipped, so it is not pushed twice. LREM with count -1 removes the occurrence nearest the
// tail: the oldest of identical letters. Returns 1 moved, 0 gone.
var redriveScript = redis.NewScript(`
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return 0 end
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LREM', KEYS[1], -1, ARGV[1])
return 1
`)

// Match selects dead letters for Redrive, Purge and Scan; nil selects every one.
type Match func(*engine.Message) (bool, error)

// Redrive moves up to limit dead letters (limit <= 0: as many as the list held when it started;
// letters dead-lettered meanwhile wait for the next redrive), oldest first, that match selects
// (nil: every one), from the list dlq to the list target: LPUSH of RedriveCopy, then LREM of
// the exact element. Letters that do not match stay, in order. Atomically (one script per
// letter, pipelined) when both keys hash to one slot, else in that order, so a crash leaves a
// duplicate, never a loss. It returns how many it moved, also on error.
func Redrive(ctx context.Context, c redis.UniversalClient, dlq, target string, limit int, match Match) (int, error) {
	if dlq == target {
		return 0, fmt.Errorf("redislist: redrive: dead-letter list and target are both %q", dlq)
	}
	atomic := redisconn.SameSlot(c, dlq, target)
	loaded := false
	return walk(ctx, c, dlq, limit, match, "redrive", func(ctx context.Context, batch []DeadLetter) (int, error) {
		if !atomic {
			return redriveInOrder(ctx, c, dlq, target, batch)
		}
		if !loaded {
			if err := redriveScript.Load(ctx, c).Err(); err != nil {
				return 0, fmt.Errorf("redislist: redrive: load script: %w", err)
			}
			loaded = true
		}
		return redriveAtomic(ctx, c, dlq, target, batch)
	})
}

// Purge deletes up to limit dead letters (limit <= 0: all there when it starts) that match
// selects (nil: every one) from the list dlq, oldest first, each with LREM of its exact element
// (count -1: the occurrence nearest the tail), and returns how many it deleted, also on error.
func Purge(ctx context.Context, c redis.UniversalClient, dlq string, limit int, match Match) (int, error) {
	return walk(ctx, c, dlq, limit, match, "purge", func(ctx context.Context, batch []DeadLetter) (int, error) {
		pipe := c.Pipeline()
		cmds := make([]*redis.IntCmd, len(batch))
		for i, dl := range batch {
			cmds[i] = pipe.LRem(ctx, dlq, -1, dl.Raw)
		}
		_, _ = pipe.Exec(ctx)
		deleted := 0
		for _, cmd := range cmds {
			n, err := cmd.Result()
			if err != nil {
				return deleted, fmt.Errorf("redislist: purge: lrem %s: %w", dlq, err)
			}
			deleted += int(n)
		}
		return deleted, nil
	})
}

// Scan returns up to limit dead letters (0: all) of the list key that match selects, oldest
// first, and how many match in all; it reads the whole list page by page from the tail.
func Scan(ctx context.Context, c redis.UniversalClient, key string, limit int, match Match) ([]DeadLetter, int64, error) {
	var (
		out   []DeadLetter
		total int64
	)
	for off := int64(0); ; off += redrivePage {
		els, err := c.LRange(ctx, key, -(off + redrivePage), -(off + 1)).Result()
		if err != nil {
			return out, total, fmt.Errorf("redislist: lrange %s: %w", key, err)
		}
		if len(els) == 0 {
			return out, total, nil
		}
		sel, _, err := selected(deadLetters(key, els), match, 0)
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
		if len(els) < redrivePage {
			return out, total, nil
		}
	}
}

// selected returns the letters of batch that match selects, at most max (max <= 0: all), and
// how many letters of batch it looked at.
func selected(batch []DeadLetter, match Match, max int) ([]DeadLetter, int, error) {
	out := batch[:0:0]
	for i, dl := range batch {
		if max > 0 && len(out) == max {
			return out, i, nil
		}
		if match != nil {
			ok, err := match(dl.Message)
			if err != nil {
				return out, i, fmt.Errorf("dead letter %d from the oldest: %w", i+1, err)
			}
			if !ok {
				continue
			}
		}
		out = append(out, dl)
	}
	return out, len(batch), nil
}

// walk reads the list dlq page by page from the tail (oldest first) and hands the letters of
// each page that match selects to step, which moves or deletes them and returns how many. The
// letters that do not match stay at the tail, so the next page starts past them. The list's
// length at the start bounds the walk: a letter that fails again at once comes back at the
// head, and must not be moved round in a loop.
func walk(ctx context.Context, c redis.UniversalClient, dlq string, limit int, match Match, what string, step func(ctx context.Context, batch []DeadLetter) (int, error)) (int, error) {
	total, err := c.LLen(ctx, dlq).Result()
	if err != nil {
		return 0, fmt.Errorf("redislist: %s: llen %s: %w", what, dlq, err)
	}
	remaining := int(total)
	if limit > 0 && match == nil {
		remaining = min(remaining, limit)
	}
	done, kept := 0, int64(0)
	for remaining > 0 && (limit <= 0 || done < limit) {
		n := min(redrivePage, remaining)
		els, err := c.LRange(ctx, dlq, -(kept + int64(n)), -(kept + 1)).Result()
		if err != nil {
			return done, fmt.Errorf("redislist: %s: lrange %s: %w", what, dlq, err)
		}
		if len(els) == 0 {
			break
		}
		left := 0
		if limit > 0 {
			left = limit - done
		}
		batch := deadLetters(dlq, els)
		sel, looked, merr := selected(batch, match, left)
		if len(sel) > 0 {
			k, err := step(ctx, sel)
			done += k
			if err != nil {
				return done, err
			}
		}
		if merr != nil {
			return done, merr
		}
		kept += int64(looked - len(sel))
		// Letters that vanished meanwhile count too: each page handles the tail's n oldest.
		remaining -= len(batch)
	}
	return done, nil
}

func redriveAtomic(ctx context.Context, c redis.UniversalClient, dlq, target string, batch []DeadLetter) (int, error) {
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, dl := range batch {
		cmds[i] = redriveScript.EvalSha(ctx, pipe, []string{dlq, target}, dl.Raw, RedriveCopy(dl.Message))
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	moved := 0
	for _, cmd := range cmds {
		n, err := cmd.Int()
		if err != nil {
			return moved, fmt.Errorf("redislist: redrive to %s: %w", target, err)
		}
		moved += n
	}
	return moved, nil
}

// redriveInOrder pushes every copy of batch, then removes the letters whose copies were pushed.
func redriveInOrder(ctx context.Context, c redis.UniversalClient, dlq, target string, batch []DeadLetter) (int, error) {
	pipe := c.Pipeline()
	pushes := make([]*redis.IntCmd, len(batch))
	for i, dl := range batch {
		pushes[i] = pipe.LPush(ctx, target, RedriveCopy(dl.Message))
	}
	_, _ = pipe.Exec(ctx)
	wrote := len(batch)
	var werr error
	for i, cmd := range pushes {
		if err := cmd.Err(); err != nil {
			wrote, werr = i, fmt.Errorf("redislist: redrive: lpush %s: %w", target, err)
			break
		}
	}
	if wrote > 0 {
		pipe = c.Pipeline()
		for _, dl := range batch[:wrote] {
			pipe.LRem(ctx, dlq, -1, dl.Raw)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, fmt.Errorf("redislist: redrive: lrem %s (%d copies already pushed): %w", dlq, wrote, err)
		}
	}
	return wrote, werr
}
