package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// retryCountHeader is the header flowrun's copies carry (SPEC §5); the attempt is its value + 1.
const retryCountHeader = "x-retry-count"

// runRules decodes each entry's JSON payload and routes it: an EUR order over 50 on its first
// attempt is retried (a copy XADDed to the same stream, then the original XACKed; the copy comes
// back as attempt 2), every other delivery is emitted to an out stream with one added header and
// acknowledged. So n entries make n + n/10 deliveries, n emits and n/10 copies on each side.
//
// Plain: XREADGROUP COUNT batch, json.Unmarshal each payload into a struct, the same decision,
// then one pipeline per batch with the XADDs (emits and copies, in the fields flowrun writes)
// and one XACK of the batch.
func runRules(ctx context.Context, b *bench) (results, error) {
	n := int64(b.o.n)
	copies := int64(expectedRetries(b.o.n))
	total := n + copies // deliveries
	plainKey, flowKey := "bench:rules:plain", "bench:rules:flowrun"
	if err := preloadStreams(ctx, b.rdb, b.o.n, plainKey, flowKey); err != nil {
		return results{}, err
	}
	r := row{name: "rules"}
	var err error
	r.plain, err = b.timePlain(ctx, total, streamSettled(b.obs, plainKey, "g"), "rules", plainKey, total)
	if err != nil {
		return results{}, err
	}
	cfg := b.rulesConfig(flowKey, b.concurrencyLine(), "")
	r.flowrun, r.rss, err = b.timeFlowrun("rules", cfg, total, streamSettled(b.obs, flowKey, "g"))
	if err != nil {
		return results{}, err
	}
	for _, key := range []string{plainKey, flowKey} {
		if err := checkRules(ctx, b.rdb, key, n, copies); err != nil {
			return results{}, err
		}
	}
	r.report()
	return results{rows: []row{r}}, nil
}

// rulesConfig is the rules workload's pipeline on stream, with the concurrency line and extra
// pipeline blocks (the flow workload's).
func (b *bench) rulesConfig(stream, concurrency, extra string) string {
	return b.redisBlock() + fmt.Sprintf(`pipeline "rules" {
  source "stream" {
    stream   = %q
    group    = "g"
    consumer = "flowrun"
    batch    = %d
  }
%s  max_attempts = 3 # never reached; keeps the lint about an uncapped retry quiet
%s
  rule "large-eur-first-attempt" {
    when    = "payload.amount > 50 && payload.currency == 'EUR' && attempt == 1"
    outcome = "retry"
  }
  rule "route" {
    emit "stream" {
      key     = %q
      headers = { routed = "'yes'" }
    }
    outcome = "ack"
  }
}
`, stream, b.o.batch, concurrency, extra, stream+":out")
}

// expectedRetries counts the entries among the first n that the rules retry.
func expectedRetries(n int) int {
	c := 0
	for i := range n {
		if o := orderFor(i); retryFirst(&o, 1) {
			c++
		}
	}
	return c
}

// retryFirst is the rule's condition: payload.amount > 50 && payload.currency == 'EUR' &&
// attempt == 1.
func retryFirst(o *order, attempt int) bool {
	return o.Amount > 50 && o.Currency == "EUR" && attempt == 1
}

// plainRules is the hand-written consumer of the rules workload.
func (b *bench) plainRules(ctx context.Context, stream, out string, total int64) error {
	if err := b.rdb.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
		return err
	}
	args := &redis.XReadGroupArgs{Group: "g", Consumer: "plain", Streams: []string{stream, ">"}, Count: int64(b.o.batch), Block: time.Second}
	ids := make([]string, 0, b.o.batch)
	for done := int64(0); done < total; {
		res, err := b.rdb.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return fmt.Errorf("xreadgroup: %w", err)
		}
		ids = ids[:0]
		p := b.rdb.Pipeline()
		for _, s := range res {
			for _, m := range s.Messages {
				dest, fields, err := routeRules(m, stream, out)
				if err != nil {
					return err
				}
				p.XAdd(ctx, &redis.XAddArgs{Stream: dest, Values: fields})
				ids = append(ids, m.ID)
			}
		}
		p.XAck(ctx, stream, "g", ids...)
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		done += int64(len(ids))
	}
	return nil
}

// routeRules decides one delivery: the key to XADD to and the fields, as flowrun writes them
// (headers sorted by name, then payload). A retry copies the entry's headers with
// x-retry-count one higher; an emit carries the payload and routed=yes.
func routeRules(m redis.XMessage, stream, out string) (string, []string, error) {
	p, _ := m.Values["payload"].(string)
	var o order
	if err := json.Unmarshal([]byte(p), &o); err != nil {
		return "", nil, fmt.Errorf("entry %s: %w", m.ID, err)
	}
	retries := 0
	if v, ok := m.Values[retryCountHeader].(string); ok {
		retries, _ = strconv.Atoi(v)
	}
	if !retryFirst(&o, retries+1) {
		return out, []string{"routed", "yes", "payload", p}, nil
	}
	names := make([]string, 0, len(m.Values))
	for k := range m.Values {
		if k != "payload" && k != retryCountHeader {
			names = append(names, k)
		}
	}
	names = append(names, retryCountHeader)
	slices.Sort(names)
	fields := make([]string, 0, 2*len(names)+2)
	for _, k := range names {
		v, _ := m.Values[k].(string)
		if k == retryCountHeader {
			v = strconv.Itoa(retries + 1)
		}
		fields = append(fields, k, v)
	}
	return stream, append(fields, "payload", p), nil
}

// checkRules verifies one side's result: every delivery settled, n entries emitted with the
// added header, and exactly the expected copies appended to the source stream.
func checkRules(ctx context.Context, rdb *redis.Client, stream string, n, copies int64) error {
	if err := checkGroup(ctx, rdb, stream, "g", n+copies); err != nil {
		return err
	}
	var srcLen, outLen *redis.IntCmd
	var first *redis.XMessageSliceCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		srcLen, outLen = p.XLen(ctx, stream), p.XLen(ctx, stream+":out")
		first = p.XRangeN(ctx, stream+":out", "-", "+", 1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("check %s: %w", stream, err)
	}
	if srcLen.Val() != n+copies || outLen.Val() != n {
		return fmt.Errorf("check %s: %d entries (want %d: %d and %d copies), %d emitted (want %d)",
			stream, srcLen.Val(), n+copies, n, copies, outLen.Val(), n)
	}
	if ms := first.Val(); len(ms) != 1 || ms[0].Values["routed"] != "yes" || ms[0].Values["payload"] == nil {
		return fmt.Errorf("check %s: emitted entry %v lacks routed=yes or a payload", stream, ms)
	}
	return nil
}
