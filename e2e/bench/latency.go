package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// latencyWarmup is offered before the measured -duration; its entries are not counted.
	latencyWarmup = 500 * time.Millisecond
	// maxBehind is how far the producer may fall behind its schedule before it sends the
	// backlog in one pipeline instead of one XADD at a time.
	maxBehind = 100
)

// runLatency offers -rate XADDs per second for -duration (after a warm-up) to one side at a time
// and measures, per entry, the handler's wall clock minus the producer's wall clock just before
// its XADD (field sent, in µs). Both sides run the same handler: XADD to an out stream with
// handled (flowrun: now().UnixMicro() in the rule's header expression; plain: time.Now() in the
// loop), sent and payload, then XACK. The percentiles come from the out streams, read back the
// same way for both. Each side has its own stream and group, created at "$" before it starts.
func runLatency(ctx context.Context, b *bench) (results, error) {
	prod := redis.NewClient(&redis.Options{Addr: b.srv.Addr})
	defer prod.Close()
	var lr latencyRow

	// Plain: XREADGROUP COUNT batch BLOCK 1s; per entry the handled time; one pipeline of the
	// XADDs and the XACK.
	plainKey := "bench:latency:plain"
	if err := b.rdb.XGroupCreateMkStream(ctx, plainKey, "g", "$").Err(); err != nil {
		return results{}, err
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.plainLatency(pctx, plainKey, plainKey+":out") }()
	plainRun, err := b.offerTo(ctx, prod, plainKey, "plain")
	if err == nil {
		lr.plain, err = b.latenciesOf(ctx, plainKey+":out", plainRun)
	}
	stop()
	if cerr := <-done; err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = fmt.Errorf("plain consumer: %w", cerr)
	}
	if err != nil {
		return results{}, fmt.Errorf("plain: %w", err)
	}
	fmt.Printf("%-17s plain %s\n", "latency", lr.plain)

	flowKey := "bench:latency:flowrun"
	if err := b.rdb.XGroupCreateMkStream(ctx, flowKey, "g", "$").Err(); err != nil {
		return results{}, err
	}
	cfg := b.redisBlock() + fmt.Sprintf(`pipeline "latency" {
  source "stream" {
    stream   = %q
    group    = "g"
    consumer = "flowrun"
    batch    = %d
  }
%s
  rule "stamp" {
    emit "stream" {
      key     = %q
      headers = { handled = "now().UnixMicro()", sent = "headers['sent']" }
    }
    outcome = "ack"
  }
}
`, flowKey, b.o.batch, b.concurrencyLine(), flowKey+":out")
	p, err := b.startFlowrun("latency", cfg)
	if err != nil {
		return results{}, err
	}
	flowRun, err := b.offerTo(p.ctx, prod, flowKey, "flowrun")
	if err == nil {
		lr.flowrun, err = b.latenciesOf(p.ctx, flowKey+":out", flowRun)
	}
	if err != nil {
		p.kill()
		return results{}, fmt.Errorf("flowrun: %w", err)
	}
	if lr.rss, err = p.stop(); err != nil {
		return results{}, err
	}
	lr.offered = (plainRun.rate() + flowRun.rate()) / 2
	fmt.Printf("%-17s flowrun %s, p99 ratio %.2f, flowrun peak RSS %s\n", "latency", lr.flowrun, ratioOf(lr.flowrun.p99, lr.plain.p99), mib(lr.rss))
	return results{lat: []latencyRow{lr}}, nil
}

// offered is what a producer sent: sent entries from start, in took.
type offered struct {
	sent  int
	start time.Time
	took  time.Duration
}

func (o offered) rate() float64 { return float64(o.sent) / o.took.Seconds() }

// offerTo waits until consumer blocks reading stream (the only client that blocks meanwhile),
// offers the rate to it and waits until every entry has been handled (stream's out stream has
// them all).
func (b *bench) offerTo(ctx context.Context, prod *redis.Client, stream, consumer string) (offered, error) {
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		info, err := b.obs.InfoMap(ctx, "clients").Result()
		n, _ := strconv.Atoi(info["Clients"]["blocked_clients"])
		return n > 0, err
	}); err != nil {
		return offered{}, fmt.Errorf("waiting for %s to block on %s: %w", consumer, stream, err)
	}
	time.Sleep(100 * time.Millisecond)
	o, err := offer(ctx, prod, stream, b.o.rate, latencyWarmup+b.o.duration)
	if err != nil {
		return o, err
	}
	return o, waitFor(ctx, 30*time.Second, func() (bool, error) {
		l, err := b.obs.XLen(ctx, stream+":out").Result()
		return l >= int64(o.sent), err
	})
}

// offer XADDs to stream at rate for d, each entry stamped (field sent, unix µs) just before it
// is sent, one XADD at a time on schedule; a producer that fell more than maxBehind behind
// sends its backlog in one pipeline.
func offer(ctx context.Context, rdb *redis.Client, stream string, rate int, d time.Duration) (offered, error) {
	interval := float64(time.Second) / float64(rate)
	start := time.Now()
	i := 0
	for ctx.Err() == nil {
		el := time.Since(start)
		if el >= d {
			return offered{sent: i, start: start, took: el}, nil
		}
		due := int(float64(el)/interval) + 1
		switch {
		case due-i > maxBehind:
			p := rdb.Pipeline()
			sent := strconv.FormatInt(time.Now().UnixMicro(), 10)
			for ; i < due; i++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"sent", sent, "payload", payload(i)}})
			}
			if _, err := p.Exec(ctx); err != nil {
				return offered{}, fmt.Errorf("xadd: %w", err)
			}
		case due > i:
			sent := strconv.FormatInt(time.Now().UnixMicro(), 10)
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"sent", sent, "payload", payload(i)}}).Err(); err != nil {
				return offered{}, fmt.Errorf("xadd: %w", err)
			}
			i++
		default:
			time.Sleep(time.Until(start.Add(time.Duration(float64(i) * interval))))
		}
	}
	return offered{}, context.Cause(ctx)
}

// plainLatency is the plain blocking consumer of the latency workload; it runs until ctx ends.
func (b *bench) plainLatency(ctx context.Context, stream, out string) error {
	args := &redis.XReadGroupArgs{Group: "g", Consumer: "plain", Streams: []string{stream, ">"}, Count: int64(b.o.batch), Block: time.Second}
	ids := make([]string, 0, b.o.batch)
	for ctx.Err() == nil {
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
				handled := strconv.FormatInt(time.Now().UnixMicro(), 10)
				sent, _ := m.Values["sent"].(string)
				pl, _ := m.Values["payload"].(string)
				p.XAdd(ctx, &redis.XAddArgs{Stream: out, Values: []string{"handled", handled, "sent", sent, "payload", pl}})
				ids = append(ids, m.ID)
			}
		}
		p.XAck(ctx, stream, "g", ids...)
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
	}
	return nil
}

// latenciesOf reads the out stream of what o sent and returns the percentiles of handled − sent
// over the entries sent after the warm-up.
func (b *bench) latenciesOf(ctx context.Context, out string, o offered) (latencies, error) {
	var (
		lat   []int64
		last  int64 // the latest handled time
		from  = o.start.Add(latencyWarmup).UnixMicro()
		start = "-"
		total int
	)
	for {
		ms, err := b.rdb.XRangeN(ctx, out, start, "+", 10_000).Result()
		if err != nil {
			return latencies{}, fmt.Errorf("read %s: %w", out, err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			sent, err1 := strconv.ParseInt(fmt.Sprint(m.Values["sent"]), 10, 64)
			handled, err2 := strconv.ParseInt(fmt.Sprint(m.Values["handled"]), 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return latencies{}, fmt.Errorf("%s entry %s: %w", out, m.ID, err)
			}
			if sent >= from {
				lat = append(lat, handled-sent)
			}
			last = max(last, handled)
		}
		total += len(ms)
		start = "(" + ms[len(ms)-1].ID
	}
	if total != o.sent {
		return latencies{}, fmt.Errorf("%s has %d entries, want %d", out, total, o.sent)
	}
	if len(lat) == 0 {
		return latencies{}, errors.New("no samples after the warm-up")
	}
	slices.Sort(lat)
	return latencies{
		samples: len(lat),
		behind:  time.Duration(last-o.start.Add(o.took).UnixMicro()) * time.Microsecond,
		p50:     percentile(lat, 0.50),
		p99:     percentile(lat, 0.99),
		p999:    percentile(lat, 0.999),
	}, nil
}

// percentile is the nearest-rank q-quantile of sorted µs values.
func percentile(sorted []int64, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return time.Duration(sorted[i]) * time.Microsecond
}

// waitFor polls cond every 5ms until it holds, fails, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := cond()
		if err != nil && ctx.Err() == nil && !isNoSuchKey(err) {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %s: %w", timeout, context.Cause(ctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
}
