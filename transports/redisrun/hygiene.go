package redisrun

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// HygieneEvery is how often RunTimers trims the step streams and prunes the runs index.
const HygieneEvery = 30 * time.Second

// hygienePages bounds the runs index pages one pass looks at.
const hygienePages = 10

// hygiene keeps the workflow's keys from growing without end: each step stream is trimmed below
// what its group has not finished with (every step message is acknowledged once settled), and
// runs whose record expired leave the runs index, and the join hashes of for_each visits that
// are over are deleted.
// Each part runs whatever the others did; their errors are joined.
func (s *Store) hygiene(ctx context.Context) error {
	var errs []error
	for _, st := range s.g.Steps {
		errs = append(errs, s.trimStep(ctx, s.stepKey(st.Name)))
	}
	return errors.Join(append(errs, s.pruneFans(ctx), s.pruneRuns(ctx))...)
}

// trimStep trims stream below its group's lowest pending id, or else below the last id it was
// delivered. New entries come at the end and pending ones can only leave, so what is trimmed
// stays trimmable however the stream moves meanwhile.
func (s *Store) trimStep(ctx context.Context, stream string) error {
	groups, err := s.c.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return nil
		}
		return fmt.Errorf("redisrun: xinfo groups %s: %w", stream, err)
	}
	low := ""
	for _, g := range groups {
		keep := g.LastDeliveredID
		if g.Pending > 0 {
			p, err := s.c.XPending(ctx, stream, g.Name).Result()
			if err != nil {
				return fmt.Errorf("redisrun: xpending %s: %w", stream, err)
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
		return nil
	}
	if err := s.c.XTrimMinID(ctx, stream, low).Err(); err != nil {
		return fmt.Errorf("redisrun: xtrim %s: %w", stream, err)
	}
	return nil
}

// pruneRuns removes from the runs index the runs started before the retention whose record is
// gone (a finished run expires retention after it ended, so only those can be).
func (s *Store) pruneRuns(ctx context.Context) error {
	max := strconv.FormatInt(time.Now().Add(-s.retention()).UnixMilli(), 10)
	var offset int64
	for range hygienePages {
		ids, err := s.c.ZRangeByScore(ctx, s.k.runs(), &redis.ZRangeBy{Min: "-inf", Max: max, Offset: offset, Count: listPage}).Result()
		if err != nil {
			return fmt.Errorf("redisrun: read runs of %s: %w", s.g.Name, err)
		}
		if len(ids) == 0 {
			return nil
		}
		pipe := s.c.Pipeline()
		ex := make([]*redis.IntCmd, len(ids))
		for i, id := range ids {
			ex[i] = pipe.Exists(ctx, s.k.run(id))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("redisrun: read runs of %s: %w", s.g.Name, err)
		}
		var gone []any
		for i, c := range ex {
			if c.Val() == 0 {
				gone = append(gone, ids[i])
			}
		}
		if len(gone) > 0 {
			if err := s.c.ZRem(ctx, s.k.runs(), gone...).Err(); err != nil {
				return fmt.Errorf("redisrun: prune runs of %s: %w", s.g.Name, err)
			}
		}
		offset += int64(len(ids) - len(gone))
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
