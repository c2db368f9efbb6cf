package redisrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Deadline reads when visit of run id times out (its member of the timeouts set); false when
// none is registered (a step without timeout, or a visit that has moved on or fired).
func (s *Store) Deadline(ctx context.Context, id string, visit int) (time.Time, bool, error) {
	ms, err := s.c.ZScore(ctx, s.k.timeouts(), timerMember(id, visit)).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("redisrun: read timeout of run %s: %w", id, err)
	}
	return msTime(int64(ms)), true, nil
}
