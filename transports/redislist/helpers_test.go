package redislist

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

func newSource(t *testing.T, c redis.UniversalClient, opts Options) *Source {
	t.Helper()
	if opts.Block == 0 {
		opts.Block = 100 * time.Millisecond // quick stops
	}
	src, err := New(c, opts, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func lrange(t *testing.T, c redis.UniversalClient, key string) []string {
	t.Helper()
	v, err := c.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantList(t *testing.T, c redis.UniversalClient, key string, want ...string) {
	t.Helper()
	if got := lrange(t, c, key); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("LRANGE %s = %q, want %q", key, got, want)
	}
}

func llen(t *testing.T, c redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := c.LLen(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func lpush(t *testing.T, c redis.UniversalClient, key string, vals ...string) {
	t.Helper()
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = v
	}
	if err := c.LPush(context.Background(), key, args...).Err(); err != nil {
		t.Fatal(err)
	}
}
