package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// runNoop drains a preloaded stream with a no-op rule. Plain: XREADGROUP COUNT batch, then one
// XACK of the batch's ids.
func runNoop(ctx context.Context, b *bench) (results, error) {
	r, err := b.drainStream(ctx, "noop", "stream", "")
	if err != nil {
		return results{}, err
	}
	return results{rows: []row{r}}, nil
}

// drainStream preloads two streams with n entries each, drains one with the plain XREADGROUP +
// XACK loop and the other with flowrun's source of kind (stream, claiming, reclaim) and an ack
// rule, and checks both groups end with everything read and nothing pending. extra is added to
// the source block (min_idle).
func (b *bench) drainStream(ctx context.Context, name, kind, extra string) (row, error) {
	n := int64(b.o.n)
	plainKey, flowKey := "bench:"+name+":plain", "bench:"+name+":flowrun"
	if err := preloadStreams(ctx, b.rdb, b.o.n, plainKey, flowKey); err != nil {
		return row{}, err
	}
	r := row{name: name}
	var err error
	r.plain, err = b.timePlain(ctx, n, streamSettled(b.obs, plainKey, "g"), "readack", plainKey, n)
	if err != nil {
		return row{}, err
	}
	cfg := b.redisBlock() + fmt.Sprintf(`pipeline %q {
  source %q {
    stream   = %q
    group    = "g"
    consumer = "flowrun"
    batch    = %d
%s  }
%s
  rule "noop" {
    outcome = "ack"
  }
}
`, name, kind, flowKey, b.o.batch, extra, b.concurrencyLine())
	r.flowrun, r.rss, err = b.timeFlowrun(name, cfg, n, streamSettled(b.obs, flowKey, "g"))
	if err != nil {
		return row{}, err
	}
	for _, key := range []string{plainKey, flowKey} {
		if err := checkGroup(ctx, b.rdb, key, "g", n); err != nil {
			return row{}, err
		}
	}
	r.report()
	return r, nil
}

// plainReadAck is the plain no-op consumer: XREADGROUP COUNT batch, then one XACK per batch,
// until n entries are acknowledged.
func (b *bench) plainReadAck(ctx context.Context, stream string, n int64) error {
	if err := b.rdb.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
		return err
	}
	args := &redis.XReadGroupArgs{Group: "g", Consumer: "plain", Streams: []string{stream, ">"}, Count: int64(b.o.batch), Block: time.Second}
	for done := int64(0); done < n; {
		res, err := b.rdb.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return fmt.Errorf("xreadgroup: %w", err)
		}
		ids := messageIDs(res)
		if err := b.rdb.XAck(ctx, stream, "g", ids...).Err(); err != nil {
			return fmt.Errorf("xack: %w", err)
		}
		done += int64(len(ids))
	}
	return nil
}

// checkGroup verifies that group has read want entries of stream and has none pending.
func checkGroup(ctx context.Context, rdb *redis.Client, stream, group string, want int64) error {
	gs, err := rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return fmt.Errorf("check %s: %w", stream, err)
	}
	for _, g := range gs {
		if g.Name == group {
			if g.EntriesRead != want || g.Pending != 0 {
				return fmt.Errorf("check %s: group %s read %d (want %d), %d pending (want 0)", stream, group, g.EntriesRead, want, g.Pending)
			}
			return nil
		}
	}
	return fmt.Errorf("check %s: no group %s", stream, group)
}
