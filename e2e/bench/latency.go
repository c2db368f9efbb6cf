package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
// its XADD (field sent, unix µs); all processes run on one machine, so one clock. It has two rows:
//
//   - latency: the handler only acknowledges. flowrun's rule emits a record to stdout (no Redis
//     command) with handled = now().UnixMicro() and sent; plain notes time.Now() in memory and
//     XACKs the batch. Redis sees XREADGROUP and XACK from both.
//   - latency-emit: the handler emits to an out stream with handled, sent and the payload, then
//     acknowledges. Plain: one pipeline of the batch's XADDs and its XACK. The samples are read
//     back from the out streams, the same way for both.
//
// Each side reads its own stream with its own group, created at "$" before it starts; both
// read with COUNT -batch and BLOCK 1s.
func runLatency(ctx context.Context, b *bench) (results, error) {
	prod := redis.NewClient(&redis.Options{Addr: b.srv.Addr})
	defer prod.Close()
	var res results
	for _, emit := range []bool{false, true} {
		name := "latency"
		if emit {
			name = "latency-emit"
		}
		lr := latencyRow{name: name}
		plainRun, err := b.plainLatencySide(ctx, prod, name, emit, &lr.plain)
		if err != nil {
			return results{}, fmt.Errorf("plain: %w", err)
		}
		fmt.Printf("%-17s plain %s\n", name, lr.plain)
		flowRun, err := b.flowrunLatencySide(ctx, prod, name, emit, &lr.flowrun, &lr.rss)
		if err != nil {
			return results{}, fmt.Errorf("flowrun: %w", err)
		}
		lr.offered = (plainRun.rate() + flowRun.rate()) / 2
		fmt.Printf("%-17s flowrun %s, p99 ratio %.2f, flowrun peak RSS %s\n", name, lr.flowrun, ratioOf(lr.flowrun.p99, lr.plain.p99), mib(lr.rss))
		res.lat = append(res.lat, lr)
	}
	return res, nil
}

// plainLatencySide measures the plain consumer: XREADGROUP COUNT batch BLOCK 1s; per entry the
// handled time; then one XACK (with the XADDs, when emit) per batch. It runs in a process of its
// own, as flowrun does: in this one it would share the producer's runtime, whose network poller
// is awake for every XADD's reply anyway and would pick up its reads for free.
func (b *bench) plainLatencySide(ctx context.Context, prod *redis.Client, name string, emit bool, lat *latencies) (offered, error) {
	stream := "bench:" + name + ":plain"
	if err := b.rdb.XGroupCreateMkStream(ctx, stream, "g", "$").Err(); err != nil {
		return offered{}, err
	}
	exe, err := os.Executable()
	if err != nil {
		return offered{}, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=plain-latency", "BENCH_ADDR="+b.srv.Addr,
		"BENCH_STREAM="+stream, "BENCH_BATCH="+strconv.Itoa(b.o.batch), "BENCH_EMIT="+strconv.FormatBool(emit))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return offered{}, err
	}
	if err := cmd.Start(); err != nil {
		return offered{}, fmt.Errorf("start the plain consumer: %w", err)
	}
	var col collector
	read := make(chan struct{})
	go func() {
		defer close(read)
		col.readPlain(out)
	}()
	o, err := b.offerTo(ctx, prod, stream, b.handledCount(stream, emit, &col))
	var samples []sample
	if err == nil {
		samples, err = b.samplesOf(ctx, stream, emit, &col)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	<-read
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("plain consumer: %w", werr)
	}
	if err == nil && col.err != nil {
		err = fmt.Errorf("plain consumer's samples: %w", col.err)
	}
	if err == nil {
		*lat, err = summarize(samples, o)
	}
	return o, err
}

// childEnv names the process a bench child plays; see runChild.
const childEnv = "FLOWRUN_BENCH_CHILD"

// runChild is a bench child process: the plain latency consumer, on the server, stream, batch
// and emit its environment names, writing "sent handled" per entry to stdout when it does not
// emit, until SIGTERM.
func runChild() error {
	if role := os.Getenv(childEnv); role != "plain-latency" {
		return fmt.Errorf("unknown child %q", role)
	}
	batch, err := strconv.Atoi(os.Getenv("BENCH_BATCH"))
	if err != nil {
		return fmt.Errorf("BENCH_BATCH: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("BENCH_ADDR")})
	defer rdb.Close()
	w := bufio.NewWriter(os.Stdout)
	err = plainLatency(ctx, rdb, os.Getenv("BENCH_STREAM"), batch, os.Getenv("BENCH_EMIT") == "true", func(ss []sample) error {
		for _, s := range ss {
			fmt.Fprintf(w, "%d %d\n", s.sent, s.handled)
		}
		return w.Flush()
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// flowrunLatencySide measures flowrun: an ack rule that emits a record to stdout, or a stream
// emit, carrying the handled time and the sent field.
func (b *bench) flowrunLatencySide(ctx context.Context, prod *redis.Client, name string, emit bool, lat *latencies, rss *int64) (offered, error) {
	stream := "bench:" + name + ":flowrun"
	if err := b.rdb.XGroupCreateMkStream(ctx, stream, "g", "$").Err(); err != nil {
		return offered{}, err
	}
	emitBlock := `emit "record" {
      key     = "latency"`
	if emit {
		emitBlock = fmt.Sprintf(`emit "stream" {
      key     = %q`, stream+":out")
	}
	cfg := b.redisBlock() + fmt.Sprintf(`pipeline %q {
  source "stream" {
    stream   = %q
    group    = "g"
    consumer = "flowrun"
    batch    = %d
  }
%s
  rule "stamp" {
    %s
      headers = { handled = "now().UnixMicro()", sent = "headers['sent']" }
    }
    outcome = "ack"
  }
}
`, name, stream, b.o.batch, b.concurrencyLine(), emitBlock)
	var col collector
	var stdout io.Writer
	var records sync.WaitGroup
	if !emit {
		r, w := io.Pipe()
		defer r.Close()
		stdout = w
		records.Add(1)
		go func() {
			defer records.Done()
			col.readRecords(r)
		}()
	}
	p, err := b.startFlowrun(name, cfg, stdout)
	if err != nil {
		return offered{}, err
	}
	o, err := b.offerTo(p.ctx, prod, stream, b.handledCount(stream, emit, &col))
	var samples []sample
	if err == nil {
		samples, err = b.samplesOf(p.ctx, stream, emit, &col)
	}
	if err != nil {
		p.kill()
		return o, err
	}
	if *rss, err = p.stop(); err != nil {
		return o, err
	}
	if w, ok := stdout.(*io.PipeWriter); ok {
		w.Close()
		records.Wait()
		if col.err != nil {
			return o, fmt.Errorf("flowrun's records: %w", col.err)
		}
	}
	*lat, err = summarize(samples, o)
	return o, err
}

// sample is one entry's sent and handled times, unix µs.
type sample struct{ sent, handled int64 }

// collector gathers samples in memory: the plain consumer's without emits, and flowrun's records.
type collector struct {
	mu      sync.Mutex
	samples []sample
	err     error // readRecords: a line that is not a record with both times
}

func (c *collector) add(s ...sample) {
	c.mu.Lock()
	c.samples = append(c.samples, s...)
	c.mu.Unlock()
}

func (c *collector) len() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.samples))
}

func (c *collector) all() []sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.samples)
}

// readRecords collects the records flowrun writes to stdout (SPEC §3), until r ends.
func (c *collector) readRecords(r io.Reader) {
	c.readLines(r, func(line []byte) (sample, error) {
		var rec struct{ Headers map[string]string }
		if err := json.Unmarshal(line, &rec); err != nil {
			return sample{}, err
		}
		return sampleOf(rec.Headers["sent"], rec.Headers["handled"])
	})
}

// readPlain collects the plain latency child's "sent handled" lines until r ends.
func (c *collector) readPlain(r io.Reader) {
	c.readLines(r, func(line []byte) (sample, error) {
		sent, handled, _ := strings.Cut(string(line), " ")
		return sampleOf(sent, handled)
	})
}

// readLines collects a sample per line of r, parsed by parse, until r ends; a line that is not
// one is noted in c.err.
func (c *collector) readLines(r io.Reader, parse func([]byte) (sample, error)) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		s, err := parse(sc.Bytes())
		if err != nil {
			c.mu.Lock()
			c.err = errors.Join(c.err, fmt.Errorf("%q: %w", sc.Text(), err))
			c.mu.Unlock()
			continue
		}
		c.add(s)
	}
	io.Copy(io.Discard, r) // a line too long for the scanner: keep the writer flowing
}

func sampleOf(sent, handled string) (sample, error) {
	s, err1 := strconv.ParseInt(sent, 10, 64)
	h, err2 := strconv.ParseInt(handled, 10, 64)
	return sample{sent: s, handled: h}, errors.Join(err1, err2)
}

// handledCount is how many entries a side has handled: its out stream's length with emits, else
// the samples collected.
func (b *bench) handledCount(stream string, emit bool, col *collector) func(ctx context.Context) (int64, error) {
	if emit {
		return func(ctx context.Context) (int64, error) { return b.obs.XLen(ctx, stream+":out").Result() }
	}
	return func(context.Context) (int64, error) { return col.len(), nil }
}

// samplesOf returns a side's samples: read back from its out stream with emits, else collected.
func (b *bench) samplesOf(ctx context.Context, stream string, emit bool, col *collector) ([]sample, error) {
	if !emit {
		return col.all(), nil
	}
	out := stream + ":out"
	var samples []sample
	for start := "-"; ; {
		ms, err := b.rdb.XRangeN(ctx, out, start, "+", 10_000).Result()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", out, err)
		}
		if len(ms) == 0 {
			return samples, nil
		}
		for _, m := range ms {
			sent, _ := m.Values["sent"].(string)
			handled, _ := m.Values["handled"].(string)
			s, err := sampleOf(sent, handled)
			if err != nil {
				return nil, fmt.Errorf("%s entry %s: %w", out, m.ID, err)
			}
			samples = append(samples, s)
		}
		start = "(" + ms[len(ms)-1].ID
	}
}

// offered is what a producer sent: sent entries from start, in took.
type offered struct {
	sent  int
	start time.Time
	took  time.Duration
}

func (o offered) rate() float64 { return float64(o.sent) / o.took.Seconds() }

// offerTo waits until the side's consumer blocks reading stream (the only client that blocks
// meanwhile), offers the rate to it and waits until it has handled every entry.
func (b *bench) offerTo(ctx context.Context, prod *redis.Client, stream string, handled func(context.Context) (int64, error)) (offered, error) {
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		info, err := b.obs.InfoMap(ctx, "clients").Result()
		n, _ := strconv.Atoi(info["Clients"]["blocked_clients"])
		return n > 0, err
	}); err != nil {
		return offered{}, fmt.Errorf("waiting for a consumer to block on %s: %w", stream, err)
	}
	time.Sleep(100 * time.Millisecond)
	o, err := offer(ctx, prod, stream, b.o.rate, latencyWarmup+b.o.duration)
	if err != nil {
		return o, err
	}
	err = waitFor(ctx, 30*time.Second, func() (bool, error) {
		n, err := handled(ctx)
		return n >= int64(o.sent), err
	})
	if err != nil {
		return o, fmt.Errorf("waiting for all %d entries to be handled: %w", o.sent, err)
	}
	return o, nil
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
// With emit it XADDs handled, sent and payload to the out stream in the batch's pipeline, else
// it hands each batch's samples to out once the batch is acknowledged.
func plainLatency(ctx context.Context, rdb *redis.Client, stream string, batch int, emit bool, out func([]sample) error) error {
	args := &redis.XReadGroupArgs{Group: "g", Consumer: "plain", Streams: []string{stream, ">"}, Count: int64(batch), Block: time.Second}
	ids := make([]string, 0, batch)
	samples := make([]sample, 0, batch)
	for ctx.Err() == nil {
		res, err := rdb.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return fmt.Errorf("xreadgroup: %w", err)
		}
		ids, samples = ids[:0], samples[:0]
		p := rdb.Pipeline()
		for _, s := range res {
			for _, m := range s.Messages {
				handled := time.Now().UnixMicro()
				sent, _ := m.Values["sent"].(string)
				if emit {
					pl, _ := m.Values["payload"].(string)
					p.XAdd(ctx, &redis.XAddArgs{Stream: stream + ":out", Values: []string{"handled", strconv.FormatInt(handled, 10), "sent", sent, "payload", pl}})
				} else {
					st, _ := strconv.ParseInt(sent, 10, 64)
					samples = append(samples, sample{sent: st, handled: handled})
				}
				ids = append(ids, m.ID)
			}
		}
		p.XAck(ctx, stream, "g", ids...)
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		if len(samples) > 0 {
			if err := out(samples); err != nil {
				return err
			}
		}
	}
	return nil
}

// summarize checks that every entry o sent was handled once and returns the percentiles of
// handled − sent over the entries sent after the warm-up.
func summarize(samples []sample, o offered) (latencies, error) {
	if len(samples) != o.sent {
		return latencies{}, fmt.Errorf("%d entries handled, want %d", len(samples), o.sent)
	}
	from := o.start.Add(latencyWarmup).UnixMicro()
	var lat []int64
	var last int64 // the latest handled time
	for _, s := range samples {
		if s.sent >= from {
			lat = append(lat, s.handled-s.sent)
		}
		last = max(last, s.handled)
	}
	if len(lat) == 0 {
		return latencies{}, errors.New("no samples after the warm-up")
	}
	slices.Sort(lat)
	return latencies{
		samples: len(lat),
		p50:     percentile(lat, 0.50),
		p99:     percentile(lat, 0.99),
		p999:    percentile(lat, 0.999),
		behind:  max(0, time.Duration(last-o.start.Add(o.took).UnixMicro())*time.Microsecond),
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
