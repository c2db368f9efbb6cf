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
		h, p := codec.DecodeEnvelope([]byte(el))
		out[len(els)-1-i] = DeadLetter{Raw: el, Message: &engine.Message{Key: key, Headers: h, Payload: p}}
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

// Redrive moves up to limit dead letters (limit <= 0: as many as the list held when it started;
// letters dead-lettered meanwhile wait for the next redrive), oldest first, from the list dlq to
// the list target: LPUSH of RedriveCopy, then LREM of the exact element. Atomically (one script
// per letter, pipelined) when both keys hash to one slot, else in that order, so a crash leaves
// a duplicate, never a loss. It returns how many it moved, also on error.
func Redrive(ctx context.Context, c redis.UniversalClient, dlq, target string, limit int) (int, error) {
	if dlq == target {
		return 0, fmt.Errorf("redislist: redrive: dead-letter list and target are both %q", dlq)
	}
	total, err := c.LLen(ctx, dlq).Result()
	if err != nil {
		return 0, fmt.Errorf("redislist: redrive: llen %s: %w", dlq, err)
	}
	// The length at the start bounds the run: a letter that fails again at once comes back, and
	// must not be moved round in a loop.
	remaining := int(total)
	if limit > 0 {
		remaining = min(remaining, limit)
	}
	atomic := redisconn.SameSlot(c, dlq, target)
	if atomic && remaining > 0 {
		if err := redriveScript.Load(ctx, c).Err(); err != nil {
			return 0, fmt.Errorf("redislist: redrive: load script: %w", err)
		}
	}
	moved := 0
	for remaining > 0 {
		n := min(redrivePage, remaining)
		els, err := c.LRange(ctx, dlq, -int64(n), -1).Result()
		if err != nil {
			return moved, fmt.Errorf("redislist: redrive: lrange %s: %w", dlq, err)
		}
		if len(els) == 0 {
			break
		}
		batch := deadLetters(dlq, els)
		var k int
		if atomic {
			k, err = redriveAtomic(ctx, c, dlq, target, batch)
		} else {
			k, err = redriveInOrder(ctx, c, dlq, target, batch)
		}
		moved += k
		if err != nil {
			return moved, err
		}
		// Letters that vanished meanwhile count too: each page handles the tail's n oldest.
		remaining -= len(batch)
	}
	return moved, nil
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
