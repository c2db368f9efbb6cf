package redislist

// Durable delays on a reliable list (delayed_retry = "durable_zset"; SPEC §5 names stream
// sources, and flowrun extends it to reliable lists). A retry_after copy goes into the sorted set
// DelayKey, scored by its due time in wall-clock milliseconds, and its element leaves the
// processing list, in one script (settleScript); a read moves due copies back onto the list
// (LPUSH, as retry copies go) in another (moveDueScript), when a copy it knows of is due and at
// least once a second (moveDueNow). So
// a crash at any moment leaves the element either in the processing list (returned at the next
// start) or in the delay queue, never in neither.
//
// A member is
//
//	l1:<16 hex digits>:<the copy exactly as it is pushed back>
//
// The hex digits are random per delayed delivery, so two identical copies delayed at once are two
// members, not one whose score the second overwrites. No JSON: the copy is kept byte for byte.
// What the two durable delay queues share (due times, statistics) is in package delayq; this
// member format and its script differ from a stream's on purpose (see there).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/internal/delayq"
)

const memberPrefix = "l1:"

// memberHead is the length of a member's "l1:<16 hex>:".
const memberHead = len(memberPrefix) + 16 + 1

// encodeDelayed returns a new delay-queue member for the copy m.
func encodeDelayed(m *engine.Message) string {
	var b strings.Builder
	env := codec.EncodeEnvelope(m)
	b.Grow(memberHead + len(env))
	b.WriteString(memberPrefix)
	b.WriteString(fmt.Sprintf("%016x", rand.Uint64()))
	b.WriteByte(':')
	b.Write(env)
	return b.String()
}

// DelayedElement returns the element a delay-queue member pushes back: the copy, or the member
// itself when it is not in the member format (written by something else), as the script does.
func DelayedElement(member string) string {
	if len(member) >= memberHead && strings.HasPrefix(member, memberPrefix) && member[memberHead-1] == ':' {
		return member[memberHead:]
	}
	return member
}

// moveDueScript moves up to ARGV[2] copies due at ARGV[1] (wall-clock ms) from the delay queue
// KEYS[1] onto the list KEYS[2] with LPUSH, earliest due first (so read first). One script, so
// two workers never move one copy twice and a copy is never in both keys or neither. Returns
// {moved, the next due score or ""}.
var moveDueScript = redis.NewScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(due) do
  local e = m
  if string.sub(m, 1, 3) == 'l1:' and string.sub(m, 20, 20) == ':' then e = string.sub(m, 21) end
  redis.call('LPUSH', KEYS[2], e)
  redis.call('ZREM', KEYS[1], m)
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#due, nxt[2] or ''}
`)

// moveDue runs the move-back script and learns when the next copy is due.
func (s *Source) moveDue(ctx context.Context) error {
	res, err := moveDueScript.Run(ctx, s.client, []string{s.opts.DelayKey, s.opts.Key},
		time.Now().UnixMilli(), MoveBatch).Slice()
	if err != nil {
		return fmt.Errorf("redislist: move due copies from %s: %w", s.opts.DelayKey, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redislist: move due copies from %s: unexpected reply %v", s.opts.DelayKey, res)
	}
	if moved, _ := res[0].(int64); moved > 0 {
		s.log.Debug().Int64("count", moved).Str("delay_key", s.opts.DelayKey).Msg("moved due delayed copies back")
	}
	sc, _ := res[1].(string)
	s.nextDue.Store(delayq.ParseScore(sc))
	s.movedAt.Store(time.Now().UnixMilli())
	return nil
}

// moveDueEvery bounds how late a copy another process delayed is moved back: this source
// knows only its own copies' due times and the earliest one the last script saw.
const moveDueEvery = time.Second

// moveDueNow says whether a read should run the move-back script first: when a copy this
// source knows of is due, or moveDueEvery has passed since the last run. Otherwise the script
// would cost a round trip per read and move nothing.
func (s *Source) moveDueNow(now time.Time) bool {
	ms := now.UnixMilli()
	if nd := s.nextDue.Load(); nd != 0 && ms >= nd {
		return true
	}
	return ms-s.movedAt.Load() >= moveDueEvery.Milliseconds()
}

// lowerNextDue records a delayed copy due at ms if it is earlier than the one known.
func (s *Source) lowerNextDue(ms int64) { delayq.Lower(&s.nextDue, ms) }

// blockFor is how long a read may block: Options.Block, but no longer than until the next
// delayed copy this source knows of comes due, so a delay is honoured to well within a block.
func (s *Source) blockFor() time.Duration {
	if !s.opts.durable() {
		return s.opts.Block
	}
	return delayq.BlockFor(s.opts.Block, s.nextDue.Load())
}

// DelayStats is a delay queue as flowrun inspect shows it.
type DelayStats = delayq.Stats

// ReadDelayStats reads a delay queue's size and next due time.
func ReadDelayStats(ctx context.Context, c redis.UniversalClient, key string) (DelayStats, error) {
	d, err := delayq.ReadStats(ctx, c, key)
	if err != nil {
		return d, fmt.Errorf("redislist: %w", err)
	}
	return d, nil
}
