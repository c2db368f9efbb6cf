package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/transports/redisconn"
)

// Retention and consumer hygiene (SPEC §11): every HygieneEvery, trim = "acked" trims what
// every group of the stream has read and acknowledged, and consumer_ttl deletes consumers idle
// that long that own no pending entries.

// dropIdleConsumerScript deletes consumer ARGV[2] of group ARGV[1] on stream KEYS[1] only if it
// owns no pending entry, in one step: a consumer that was handed an entry since it was looked at
// keeps it (XGROUP DELCONSUMER would drop its pending entries). Returns 1 when deleted.
var dropIdleConsumerScript = redis.NewScript(`
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// hygiene runs the retention tasks until ctx ends. A failing pass changes nothing a delivery
// depends on (at worst the stream is trimmed later): it is tried again at the next tick, and
// logged at warn once when passes start failing (a NOPERM names the command: grant it, see the
// ACL lines of docs/acl.md) and once when they work again.
func (s *Source) hygiene(ctx context.Context) {
	t := time.NewTicker(HygieneEvery)
	defer t.Stop()
	state := redisconn.NewStateLog(s.log, "retention (trim, consumer_ttl)", s.secrets...)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.hygienePass(ctx); err != nil {
			if ctx.Err() == nil {
				state.Fail(err)
			}
			continue
		}
		state.OK()
	}
}

// hygienePass is one round of trim and consumer_ttl.
func (s *Source) hygienePass(ctx context.Context) error {
	if s.o.Trim == TrimAcked {
		if n, err := s.trimAcked(ctx); err != nil {
			return err
		} else if n > 0 {
			s.log.Debug().Int64("entries", n).Msg("trimmed acknowledged entries")
		}
	}
	if s.o.ConsumerTTL > 0 {
		return s.dropIdleConsumers(ctx)
	}
	return nil
}

// trimAcked trims the stream below the lowest id some group has not finished with: its lowest
// pending id, or else the last id it was delivered (kept, though acknowledged). A group that
// read nothing yet keeps everything.
func (s *Source) trimAcked(ctx context.Context) (int64, error) {
	groups, err := s.c.XInfoGroups(ctx, s.o.Stream).Result()
	if err != nil {
		return 0, fmt.Errorf("redisstream: xinfo groups %s: %w", s.o.Stream, err)
	}
	if len(groups) == 0 {
		return 0, nil
	}
	var low string
	for _, g := range groups {
		keep := g.LastDeliveredID
		if g.Pending > 0 {
			p, err := s.c.XPending(ctx, s.o.Stream, g.Name).Result()
			if err != nil {
				return 0, fmt.Errorf("redisstream: xpending %s %s: %w", s.o.Stream, g.Name, err)
			}
			if p.Count > 0 && idLess(p.Lower, keep) {
				keep = p.Lower
			}
		}
		if low == "" || idLess(keep, low) {
			low = keep
		}
	}
	if low == "" || low == "0-0" {
		return 0, nil
	}
	n, err := s.c.XTrimMinID(ctx, s.o.Stream, low).Result()
	if err != nil {
		return 0, fmt.Errorf("redisstream: xtrim %s minid %s: %w", s.o.Stream, low, err)
	}
	return n, nil
}

// dropIdleConsumers deletes the group's consumers idle for consumer_ttl that own nothing.
func (s *Source) dropIdleConsumers(ctx context.Context) error {
	cs, err := s.c.XInfoConsumers(ctx, s.o.Stream, s.o.Group).Result()
	if err != nil {
		return fmt.Errorf("redisstream: xinfo consumers %s %s: %w", s.o.Stream, s.o.Group, err)
	}
	for _, c := range cs {
		if c.Pending > 0 || c.Idle < s.o.ConsumerTTL || c.Name == s.o.Consumer {
			continue
		}
		n, err := dropIdleConsumerScript.Run(ctx, s.c, []string{s.o.Stream}, s.o.Group, c.Name).Int()
		if err != nil {
			return fmt.Errorf("redisstream: delete idle consumer %s of %s: %w", c.Name, s.o.Group, err)
		}
		if n == 1 {
			s.log.Info().Str("consumer", c.Name).Dur("idle_ms", c.Idle).Msg("deleted an idle consumer with nothing pending (consumer_ttl)")
		}
	}
	return nil
}

// idLess compares stream ids ("ms-seq") numerically.
func idLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	if am != bm {
		return am < bm
	}
	return as < bs
}

func splitID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	q, _ := strconv.ParseUint(seq, 10, 64)
	return m, q
}
