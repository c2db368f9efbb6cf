package schedule

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// claimer decides which process owns a tick: the first to take it. Last is the newest tick any
// process took (ok false when none ever was), where catch_up starts.
type claimer interface {
	Claim(ctx context.Context, tick time.Time) (bool, error)
	Last(ctx context.Context) (time.Time, bool, error)
}

// Prefix is the namespace of a schedule pipeline's keys, "flowrun:schedule:{<pipeline>}:": the
// hash tag keeps a tick's key and the last-fired key in one Cluster slot, so one script takes
// both.
func Prefix(pipeline string) string { return "flowrun:schedule:{" + pipeline + "}:" }

// TickKey is the key whose SET NX takes a tick: the prefix and the tick's Unix time in ms.
func TickKey(pipeline string, tick time.Time) string {
	return Prefix(pipeline) + strconv.FormatInt(tick.UnixMilli(), 10)
}

// LastKey holds the newest tick taken, in Unix ms. It never expires: without it catch_up could
// not tell "never fired" from "fired long ago".
func LastKey(pipeline string) string { return Prefix(pipeline) + "last" }

// claimScript takes a tick with SET NX PX (the value names the owner) and, when it did, raises
// the last-fired tick to it, both in one step so that a tick taken is always at or before
// "last": catch_up, which starts after "last", never fires a tick twice whatever expired. A
// key that already holds this owner's name is its own take whose reply was lost: a retry owns
// it still.
//
//	KEYS[1] tick key  KEYS[2] last key  ARGV[1] tick ms  ARGV[2] expiry ms  ARGV[3] owner
var claimScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[3], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) == ARGV[3] then
    return 1
  end
  return 0
end
local last = tonumber(redis.call('GET', KEYS[2]) or '')
if last == nil or tonumber(ARGV[1]) > last then
  redis.call('SET', KEYS[2], ARGV[1])
end
return 1
`)

// redisClaimer takes ticks in the source's Redis, shared by every process that runs the
// pipeline against it.
type redisClaimer struct {
	c        redis.UniversalClient
	pipeline string
	owner    string
	expiry   time.Duration
}

func (r *redisClaimer) Claim(ctx context.Context, tick time.Time) (bool, error) {
	n, err := claimScript.Run(ctx, r.c, []string{TickKey(r.pipeline, tick), LastKey(r.pipeline)},
		tick.UnixMilli(), r.expiry.Milliseconds(), r.owner).Int()
	if err != nil {
		return false, fmt.Errorf("take tick %s: %w", TickKey(r.pipeline, tick), err)
	}
	return n == 1, nil
}

func (r *redisClaimer) Last(ctx context.Context) (time.Time, bool, error) {
	return readLast(ctx, r.c, r.pipeline)
}

// readLast reads the newest tick taken, for catch_up and inspect.
func readLast(ctx context.Context, c redis.UniversalClient, pipeline string) (time.Time, bool, error) {
	s, err := c.Get(ctx, LastKey(pipeline)).Result()
	if err == redis.Nil {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read %s: %w", LastKey(pipeline), err)
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read %s: not a time in ms: %q", LastKey(pipeline), s)
	}
	return time.UnixMilli(ms).UTC(), true, nil
}

// memClaims are the ticks taken within this process, per pipeline, for sources without Redis:
// the pipeline's newest tick, which a reload's new source continues from. One loop takes a
// pipeline's ticks in order, so "after the newest" is "not taken yet".
var memClaims = struct {
	sync.Mutex
	last map[string]time.Time
}{last: map[string]time.Time{}}

type memClaimer struct{ pipeline string }

func (m memClaimer) Claim(_ context.Context, tick time.Time) (bool, error) {
	memClaims.Lock()
	defer memClaims.Unlock()
	if last, ok := memClaims.last[m.pipeline]; ok && !tick.After(last) {
		return false, nil
	}
	memClaims.last[m.pipeline] = tick
	return true, nil
}

func (m memClaimer) Last(context.Context) (time.Time, bool, error) {
	memClaims.Lock()
	defer memClaims.Unlock()
	t, ok := memClaims.last[m.pipeline]
	return t, ok, nil
}
