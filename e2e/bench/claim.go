package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// claimMinIdle is min_idle on both sides of the claim workload.
const claimMinIdle = time.Second

// runClaim measures flowrun's claiming and reclaim sources in four rows:
//
//   - claim-takeover, reclaim-takeover: n entries pending with a consumer that died (read
//     with XREADGROUP, never acknowledged) and idle for min_idle are taken over with an ack
//     rule. Plain: XAUTOCLAIM min_idle COUNT batch, then one XACK of the batch.
//   - claim-fresh, reclaim-fresh: a fresh backlog (entries never read) through the same
//     sources. Plain: XREADGROUP COUNT batch, then one XACK, as in noop.
func runClaim(ctx context.Context, b *bench) (results, error) {
	kinds := []struct{ row, source string }{{"claim", "claiming"}, {"reclaim", "reclaim"}}
	var res results
	for _, fresh := range []bool{false, true} {
		for _, k := range kinds {
			var r row
			var err error
			if fresh {
				r, err = b.drainStream(ctx, k.row+"-fresh", k.source, minIdleLine())
			} else {
				r, err = b.takeover(ctx, k.row+"-takeover", k.source)
			}
			if err != nil {
				return results{}, err
			}
			res.rows = append(res.rows, r)
			if err := b.rdb.FlushAll(ctx).Err(); err != nil {
				return results{}, err
			}
		}
	}
	return res, nil
}

func minIdleLine() string { return fmt.Sprintf("    min_idle = %q\n", claimMinIdle.String()) }

// takeover preloads two streams, lets a consumer "dead" read every entry of both without
// acknowledging, waits min_idle, and then has each side take them over.
func (b *bench) takeover(ctx context.Context, name, kind string) (row, error) {
	n := int64(b.o.n)
	plainKey, flowKey := "bench:"+name+":plain", "bench:"+name+":flowrun"
	if err := preloadStreams(ctx, b.rdb, b.o.n, plainKey, flowKey); err != nil {
		return row{}, err
	}
	for _, key := range []string{plainKey, flowKey} {
		if err := deadRead(ctx, b.rdb, key, n); err != nil {
			return row{}, err
		}
	}
	time.Sleep(claimMinIdle + 100*time.Millisecond)

	r := row{name: name}
	var err error
	r.plain, err = b.timePlain(ctx, n, pendingSettled(b.obs, plainKey, "g", n), "autoclaim", plainKey, n)
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
`, name, kind, flowKey, b.o.batch, minIdleLine(), b.concurrencyLine())
	r.flowrun, r.rss, err = b.timeFlowrun(name, cfg, n, pendingSettled(b.obs, flowKey, "g", n))
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

// deadRead creates group g on stream and reads all n entries as consumer "dead", acknowledging
// none, so they are all pending.
func deadRead(ctx context.Context, rdb *redis.Client, stream string, n int64) error {
	if err := rdb.XGroupCreate(ctx, stream, "g", "0").Err(); err != nil {
		return fmt.Errorf("xgroup create %s: %w", stream, err)
	}
	args := &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{stream, ">"}, Count: 10_000, Block: -1}
	for read := int64(0); read < n; {
		res, err := rdb.XReadGroup(ctx, args).Result()
		if err != nil {
			return fmt.Errorf("dead read %s: %w", stream, err)
		}
		read += int64(len(messageIDs(res)))
	}
	return nil
}

// plainAutoclaim takes over idle pending entries: XAUTOCLAIM min_idle COUNT batch, then one XACK
// of what it claimed, until n are acknowledged.
func (b *bench) plainAutoclaim(ctx context.Context, stream string, n int64) error {
	args := &redis.XAutoClaimArgs{Stream: stream, Group: "g", Consumer: "plain", MinIdle: claimMinIdle, Start: "0-0", Count: int64(b.o.batch)}
	for done := int64(0); done < n; {
		msgs, next, err := b.rdb.XAutoClaim(ctx, args).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("xautoclaim: %w", err)
		}
		args.Start = next
		if len(msgs) == 0 {
			if next == "0-0" {
				time.Sleep(10 * time.Millisecond) // nothing idle enough yet
			}
			continue
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		acked, err := b.rdb.XAck(ctx, stream, "g", ids...).Result()
		if err != nil {
			return fmt.Errorf("xack: %w", err)
		}
		done += acked
	}
	return nil
}
