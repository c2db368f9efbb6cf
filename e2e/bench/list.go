package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// runList drains a preloaded reliable list with an ack rule. Producers LPUSH and consumers take
// from the right, oldest first. Plain: one pipeline of batch LMOVE key processing RIGHT LEFT
// (one BLMOVE when the list is empty), then one pipeline of LREM processing -1 element for the
// batch: -1 searches from the tail, where the oldest element of the batch is.
func runList(ctx context.Context, b *bench) (results, error) {
	n := int64(b.o.n)
	plainKey, flowKey := "bench:list:plain", "bench:list:flowrun"
	for _, key := range []string{plainKey, flowKey} {
		if err := preloadList(ctx, b.rdb, key, b.o.n); err != nil {
			return results{}, err
		}
	}
	r := row{name: "list"}
	var err error
	r.plain, err = b.timePlain(ctx, n, listSettled(b.obs, plainKey, plainKey+":processing", n), "list", plainKey, n)
	if err != nil {
		return results{}, err
	}
	cfg := b.redisBlock() + fmt.Sprintf(`pipeline "list" {
  source "list" {
    key        = %q
    reliable   = true
    consumer   = "flowrun"
    processing = %q
    batch      = %d
  }
%s
  rule "noop" {
    outcome = "ack"
  }
}
`, flowKey, flowKey+":processing", b.o.batch, b.concurrencyLine())
	r.flowrun, r.rss, err = b.timeFlowrun("list", cfg, n, listSettled(b.obs, flowKey, flowKey+":processing", n))
	if err != nil {
		return results{}, err
	}
	for _, key := range []string{plainKey, flowKey} {
		if l := b.rdb.LLen(ctx, key).Val() + b.rdb.LLen(ctx, key+":processing").Val(); l != 0 {
			return results{}, fmt.Errorf("check %s: %d elements left in the list and its processing list", key, l)
		}
	}
	r.report()
	return results{rows: []row{r}}, nil
}

// preloadList LPUSHes n distinct payloads to key.
func preloadList(ctx context.Context, rdb *redis.Client, key string, n int) error {
	for i := 0; i < n; i += preloadChunk {
		elems := make([]any, 0, preloadChunk)
		for j := i; j < min(i+preloadChunk, n); j++ {
			elems = append(elems, payload(j))
		}
		if err := rdb.LPush(ctx, key, elems...).Err(); err != nil {
			return fmt.Errorf("preload %s: %w", key, err)
		}
	}
	return nil
}

// plainList is the hand-written reliable-list consumer.
func (b *bench) plainList(ctx context.Context, key, processing string, n int64) error {
	moves := make([]*redis.StringCmd, b.o.batch)
	elems := make([]string, 0, b.o.batch)
	for done := int64(0); done < n; {
		elems = elems[:0]
		_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range moves {
				moves[i] = p.LMove(ctx, key, processing, "RIGHT", "LEFT")
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("lmove: %w", err)
		}
		for _, c := range moves {
			if e, err := c.Result(); err == nil {
				elems = append(elems, e)
			}
		}
		if len(elems) == 0 {
			e, err := b.rdb.BLMove(ctx, key, processing, "RIGHT", "LEFT", time.Second).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return fmt.Errorf("blmove: %w", err)
			}
			elems = append(elems, e)
		}
		_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, e := range elems {
				p.LRem(ctx, processing, -1, e)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("lrem: %w", err)
		}
		done += int64(len(elems))
	}
	return nil
}
