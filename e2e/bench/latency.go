package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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
	// maxBehind is how far, in entries, a producer's sender may fall behind its schedule before
	// it sends its overdue entries in one pipeline instead of one XADD at a time (10 ms at
	// 10,000 a second).
	maxBehind = 100
)

// runLatency offers -rate XADDs per second for -duration (after a warm-up) to each side and
// measures, per entry, the handler's wall clock minus the producer's wall clock just before its
// XADD (field sent, unix µs); all processes run on one machine, so one clock. It has two rows:
//
//   - latency: the handler only acknowledges. flowrun's rule emits a record to stdout (no Redis
//     command) with handled = now().UnixMicro() and sent; plain notes time.Now() and writes
//     "sent handled" to stdout once the batch is acknowledged. Redis sees XREADGROUP and XACK
//     from both.
//   - latency-emit: the handler emits to an out stream with handled, sent and the payload, then
//     acknowledges. Plain: one pipeline of the batch's XADDs and its XACK. The samples are read
//     back from the out streams, the same way for both.
//
// Each side reads its own stream with its own group, created at "$" before it starts; both
// read with COUNT -batch and BLOCK 1s. Both sides run throughout and the producer offers the
// rate to one side at a time, in turns of latencyTurn: a stall of the machine (another tenant,
// a noisy neighbour) then falls on both sides alike, where measuring one side after the other
// let it fall on one.
func runLatency(ctx context.Context, b *bench) (results, error) {
	prod := redis.NewClient(&redis.Options{Addr: b.srv.Addr})
	defer prod.Close()
	var res results
	for _, emit := range []bool{false, true} {
		name := "latency"
		if emit {
			name = "latency-emit"
		}
		cpuAt, haveCPU := readCPUTimes()
		lr, err := b.latencyRow(ctx, prod, name, emit)
		if err != nil {
			return results{}, err
		}
		fmt.Printf("%-17s plain %s\n", name, lr.plain)
		fmt.Printf("%-17s flowrun %s, p99 ratio %.2f, flowrun peak RSS %s%s\n", name, lr.flowrun, ratioOf(lr.flowrun.p99, lr.plain.p99), mib(lr.rss), stealNote(cpuAt, haveCPU))
		res.lat = append(res.lat, lr)
	}
	return res, nil
}

// latencyRow starts both sides of one row, offers the rate to them in turns, and measures them.
func (b *bench) latencyRow(ctx context.Context, prod *redis.Client, name string, emit bool) (latencyRow, error) {
	lr := latencyRow{name: name}
	plain, err := b.startPlainLatency(ctx, name, emit)
	if err != nil {
		return lr, fmt.Errorf("plain: %w", err)
	}
	flow, err := b.startFlowrunLatency(ctx, name, emit)
	if err != nil {
		plain.stop()
		return lr, fmt.Errorf("flowrun: %w", err)
	}
	err = b.offerInTurns(flow.ctx, prod, []*latencySide{plain, flow})
	for _, side := range []*latencySide{plain, flow} {
		// Each side is stopped whatever happened; the first error is the one reported.
		var samples []sample
		var serr error
		if err == nil {
			samples, serr = b.samplesOf(flow.ctx, side.stream, side.col)
		}
		if stopErr := side.stop(); serr == nil {
			serr = stopErr
		}
		if err == nil && serr == nil {
			side.lat, serr = summarize(samples, side.o)
			side.lat.cpu = side.cpuPerEntry()
		}
		if err == nil && serr != nil {
			err = fmt.Errorf("%s: %w", side.name, serr)
		}
	}
	lr.plain, lr.flowrun, lr.rss = plain.lat, flow.lat, flow.rss
	lr.offered = (plain.o.rate() + flow.o.rate()) / 2
	return lr, err
}

// latencySide is one running consumer of a latency row, reading its own stream.
type latencySide struct {
	name   string // plain or flowrun
	stream string
	emit   bool
	col    *collector      // its stdout's samples, without emits (nil with)
	ctx    context.Context // flowrun: ends when its process exits
	// stop ends the consumer once its samples are taken and reports how it ended; it notes
	// flowrun's peak RSS in rss.
	stop func() error
	o    offered
	lat  latencies
	rss  int64
	cpu  time.Duration // the process's user and system CPU time, once stopped
}

// cpuPerEntry is the side's CPU time per entry offered to it, warm-up included.
func (s *latencySide) cpuPerEntry() time.Duration {
	if s.o.sent == 0 {
		return 0
	}
	return s.cpu / time.Duration(s.o.sent)
}

// cpuTime is a process's user and system CPU time once it has exited.
func cpuTime(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	return ps.UserTime() + ps.SystemTime()
}

// handled is how many entries the side has handled: its out stream's length with emits, else
// the lines of its stdout.
func (s *latencySide) handled(ctx context.Context, b *bench) (int64, error) {
	if s.col == nil {
		return b.obs.XLen(ctx, s.stream+":out").Result()
	}
	return s.col.len(), nil
}

// output makes the side's stdout, a collector's file, where it does not emit; nil where it does.
func (s *latencySide) output(dir string, parse func([]byte) (sample, error)) (*os.File, error) {
	if s.emit {
		return nil, nil
	}
	var err error
	if s.col, err = newCollector(dir, s.stream, parse); err != nil {
		return nil, err
	}
	return s.col.file, nil
}

// finish closes the side's stdout file and reports a line of it that was not a sample.
func (s *latencySide) finish() error {
	if s.col == nil {
		return nil
	}
	s.col.close()
	if err := s.col.failed(); err != nil {
		return fmt.Errorf("%s's output: %w", s.name, err)
	}
	return nil
}

// startPlainLatency starts the plain consumer: XREADGROUP COUNT batch BLOCK 1s; per entry the
// handled time; then one XACK (with the XADDs, when emit) per batch. It runs in a process of its
// own, as flowrun does: in this one it would share the producer's runtime, whose network poller
// is awake for every XADD's reply anyway and would pick up its reads for free.
func (b *bench) startPlainLatency(ctx context.Context, name string, emit bool) (*latencySide, error) {
	side := &latencySide{name: "plain", stream: "bench:" + name + ":plain", emit: emit}
	if err := b.rdb.XGroupCreateMkStream(ctx, side.stream, "g", "$").Err(); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=plain-latency", "BENCH_ADDR="+b.srv.Addr,
		"BENCH_STREAM="+side.stream, "BENCH_BATCH="+strconv.Itoa(b.o.batch), "BENCH_EMIT="+strconv.FormatBool(emit))
	cmd.Stderr = os.Stderr
	out, err := side.output(b.dir, parsePlain)
	if err != nil {
		return nil, err
	}
	if out != nil {
		cmd.Stdout = out
	}
	if err := cmd.Start(); err != nil {
		side.finish()
		return nil, fmt.Errorf("start the plain consumer: %w", err)
	}
	side.stop = func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		werr := cmd.Wait()
		side.cpu = cpuTime(cmd.ProcessState)
		if err := side.finish(); err != nil {
			return err
		}
		if werr != nil {
			return fmt.Errorf("plain consumer: %w", werr)
		}
		return nil
	}
	return side, nil
}

// childEnv names the process a bench child plays; see runChild.
const childEnv = "FLOWRUN_BENCH_CHILD"

// runChild is a bench child process: a throughput workload's plain consumer (runPlainChild), or
// the plain latency consumer, on the server, stream, batch
// and emit its environment names, writing "sent handled" per entry to stdout when it does not
// emit, until SIGTERM.
func runChild() error {
	switch role := os.Getenv(childEnv); role {
	case "plain":
		return runPlainChild()
	case "plain-latency":
	default:
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

// startFlowrunLatency starts flowrun with an ack rule that emits a record to stdout, or a
// stream emit, carrying the handled time and the sent field.
func (b *bench) startFlowrunLatency(ctx context.Context, name string, emit bool) (*latencySide, error) {
	side := &latencySide{name: "flowrun", stream: "bench:" + name + ":flowrun", emit: emit}
	if err := b.rdb.XGroupCreateMkStream(ctx, side.stream, "g", "$").Err(); err != nil {
		return nil, err
	}
	emitBlock := `emit "record" {
      key     = "latency"`
	if emit {
		emitBlock = fmt.Sprintf(`emit "stream" {
      key     = %q`, side.stream+":out")
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
`, name, side.stream, b.o.batch, b.concurrencyLine(), emitBlock)
	out, err := side.output(b.dir, parseRecord)
	if err != nil {
		return nil, err
	}
	var w io.Writer // nil, not a nil *os.File, with emits
	if out != nil {
		w = out
	}
	p, err := b.startFlowrun(name, cfg, w)
	if err != nil {
		side.finish()
		return nil, err
	}
	side.ctx = p.ctx
	side.stop = func() error {
		if p.ctx.Err() != nil {
			p.kill()
			side.finish()
			return context.Cause(p.ctx)
		}
		var err error
		side.rss, err = p.stop()
		side.cpu = cpuTime(p.cmd.ProcessState)
		if ferr := side.finish(); err == nil {
			err = ferr
		}
		return err
	}
	return side, nil
}

// sample is one entry's sent and handled times, unix µs.
type sample struct{ sent, handled int64 }

// collector is a side's stdout, the sample lines of the plain consumer without emits or
// flowrun's records: the child writes them straight into a file, and this process only counts
// the lines while the side is measured (reading what was added since the last count) and parses
// them in all, afterwards. Reading them through a pipe, this process copied and kept every line
// as it came, and decoded flowrun's JSON records, which took CPU (and, growing its buffer,
// memory copies) from the producer on flowrun's turn more than on plain's.
type collector struct {
	parse func(line []byte) (sample, error)
	file  *os.File
	mu    sync.Mutex
	off   int64  // bytes counted
	lines int64  // lines counted
	buf   []byte // reused by len
	err   error  // all: a line that is not a sample
}

// newCollector creates the side's output file in dir; lines are parsed with parse.
func newCollector(dir, name string, parse func(line []byte) (sample, error)) (*collector, error) {
	f, err := os.Create(filepath.Join(dir, name+".out"))
	if err != nil {
		return nil, err
	}
	return &collector{parse: parse, file: f, buf: make([]byte, 64<<10)}, nil
}

// close closes the file; the lines stay readable by all until the directory goes.
func (c *collector) close() { c.file.Close() }

// len counts the lines written so far.
func (c *collector) len() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		n, err := c.file.ReadAt(c.buf, c.off)
		c.off += int64(n)
		c.lines += int64(bytes.Count(c.buf[:n], []byte{'\n'}))
		if n < len(c.buf) || err != nil {
			return c.lines
		}
	}
}

// all parses the whole lines written so far; one that is not a sample is noted in c.err.
func (c *collector) all() []sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, err := os.ReadFile(c.file.Name())
	if err != nil {
		c.err = errors.Join(c.err, err)
		return nil
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	samples := make([]sample, 0, bytes.Count(data, []byte{'\n'}))
	for len(data) > 0 {
		line, rest, _ := bytes.Cut(data, []byte{'\n'})
		data = rest
		s, err := c.parse(line)
		if err != nil {
			c.err = errors.Join(c.err, fmt.Errorf("%q: %w", line, err))
			continue
		}
		samples = append(samples, s)
	}
	return samples
}

// failed is what all found that is not a sample.
func (c *collector) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// parseRecord reads a record flowrun writes to stdout (SPEC §3) as a sample.
func parseRecord(line []byte) (sample, error) {
	var rec struct{ Headers map[string]string }
	if err := json.Unmarshal(line, &rec); err != nil {
		return sample{}, err
	}
	return sampleOf(rec.Headers["sent"], rec.Headers["handled"])
}

// parsePlain reads a line of the plain latency child, "sent handled", as a sample.
func parsePlain(line []byte) (sample, error) {
	sent, handled, _ := strings.Cut(string(line), " ")
	return sampleOf(sent, handled)
}

func sampleOf(sent, handled string) (sample, error) {
	s, err1 := strconv.ParseInt(sent, 10, 64)
	h, err2 := strconv.ParseInt(handled, 10, 64)
	return sample{sent: s, handled: h}, errors.Join(err1, err2)
}

// samplesOf returns a side's samples: read back from its out stream with emits, else collected.
func (b *bench) samplesOf(ctx context.Context, stream string, col *collector) ([]sample, error) {
	if col != nil {
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

// offered is what the producer sent one side: sent entries in took of its turns; those sent
// from from (unix µs) on are measured, the others are its warm-up; its last turn ended at end.
type offered struct {
	sent int
	took time.Duration
	from int64
	end  time.Time
	// late is how many of the entries sent from `from` on the producer sent in a backlog
	// pipeline, having fallen more than maxBehind behind: a stall of the producer's process.
	late int
}

func (o offered) rate() float64 { return float64(o.sent) / o.took.Seconds() }

// latencyTurn is how long the producer offers the rate to one side before it turns to the other.
const latencyTurn = 250 * time.Millisecond

// offerInTurns waits until every side's consumer blocks reading its stream (the only clients
// that block meanwhile), offers the rate to one side at a time, latencyTurn each, until each had
// the warm-up and -duration, and waits until each has handled every entry it was sent.
func (b *bench) offerInTurns(ctx context.Context, prod *redis.Client, sides []*latencySide) error {
	if err := waitFor(ctx, 30*time.Second, func() (bool, error) {
		info, err := b.obs.InfoMap(ctx, "clients").Result()
		n, _ := strconv.Atoi(info["Clients"]["blocked_clients"])
		return n >= len(sides), err
	}); err != nil {
		return fmt.Errorf("waiting for %d consumers to block: %w", len(sides), err)
	}
	time.Sleep(100 * time.Millisecond)
	turns := int(math.Ceil(float64(latencyWarmup+b.o.duration) / float64(latencyTurn)))
	warm := int(math.Ceil(float64(latencyWarmup) / float64(latencyTurn)))
	for t := range turns {
		for _, side := range sides {
			o, err := offer(ctx, prod, side.stream, b.o.rate, latencyTurn, side.o.sent)
			if err != nil {
				return fmt.Errorf("%s: %w", side.name, err)
			}
			if t == warm {
				side.o.from = o.start.UnixMicro()
			}
			if t >= warm {
				side.o.late += o.late
			}
			side.o.sent += o.sent
			side.o.took += o.took
			side.o.end = o.start.Add(o.took)
		}
	}
	for _, side := range sides {
		err := waitFor(ctx, 30*time.Second, func() (bool, error) {
			n, err := side.handled(ctx, b)
			return n >= int64(side.o.sent), err
		})
		if err != nil {
			return fmt.Errorf("%s: waiting for all %d entries to be handled: %w", side.name, side.o.sent, err)
		}
	}
	return nil
}

// turn is one turn of the producer: sent entries from start, in took, late of them in backlog
// pipelines.
type turn struct {
	sent, late int
	start      time.Time
	took       time.Duration
}

// offer XADDs to stream at rate for d, each entry stamped (field sent, unix µs) just before it
// is sent. The schedule (entry j due at j/rate) is shared by producerConns senders, sender w
// sending entries w, w+producerConns, …, one XADD at a time on its own connection; a sender
// whose next entry is more than maxBehind entries overdue sends its overdue entries in one
// pipeline. Payloads are numbered from first.
//
// One sender alone could not hold 10,000 a second on a busy machine of two vCPUs: a sleep
// shorter than a millisecond lasts about one (Go's timers), after which the ten entries due go
// one round trip after another, and with the consumers and Redis busy a round trip takes 50–150
// µs. Alone, with no consumer reading, it fell into backlog pipelines for 8 % of its entries in
// one of two runs here. Several senders overlap their round trips, as the many clients behind
// such a rate do.
func offer(ctx context.Context, rdb *redis.Client, stream string, rate int, d time.Duration, first int) (turn, error) {
	interval := float64(time.Second) / float64(rate)
	start := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  = turn{start: start}
		errs []error
	)
	for w := range producerConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent, late, err := offerShare(ctx, rdb, stream, interval, start, d, first, w)
			mu.Lock()
			defer mu.Unlock()
			all.sent += sent
			all.late += late
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	all.took = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return turn{}, err
	}
	return all, nil
}

// producerConns is how many senders (each on a connection of its own) offer the latency rate.
const producerConns = 4

// offerShare sends entry w and every producerConns-th after it, each at its due time
// start + j·interval, up to the last due before d; it returns how many it sent and how many of
// those went in backlog pipelines.
func offerShare(ctx context.Context, rdb *redis.Client, stream string, interval float64, start time.Time, d time.Duration, first, w int) (sent, late int, err error) {
	dueAt := func(j int) time.Duration { return time.Duration(float64(j) * interval) }
	xadd := func(c redis.Cmdable, stamp string, j int) *redis.StringCmd {
		return c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"sent", stamp, "payload", payload(first + j)}})
	}
	for j := w; dueAt(j) < d; {
		if err := ctx.Err(); err != nil {
			return sent, late, context.Cause(ctx)
		}
		el := time.Since(start)
		switch {
		case el < dueAt(j):
			time.Sleep(dueAt(j) - el)
		case el-dueAt(j) > dueAt(maxBehind):
			p := rdb.Pipeline()
			stamp := strconv.FormatInt(time.Now().UnixMicro(), 10)
			for ; dueAt(j) <= el && dueAt(j) < d; j += producerConns {
				xadd(p, stamp, j)
				sent++
				late++
			}
			if _, err := p.Exec(ctx); err != nil {
				return sent, late, fmt.Errorf("xadd: %w", err)
			}
		default:
			if err := xadd(rdb, strconv.FormatInt(time.Now().UnixMicro(), 10), j).Err(); err != nil {
				return sent, late, fmt.Errorf("xadd: %w", err)
			}
			sent++
			j += producerConns
		}
	}
	return sent, late, nil
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
	var lat []int64
	var last int64 // the latest handled time
	for _, s := range samples {
		if s.sent >= o.from {
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
		late:    float64(o.late) / float64(len(lat)),
		p50:     percentile(lat, 0.50),
		p99:     percentile(lat, 0.99),
		p999:    percentile(lat, 0.999),
		behind:  max(0, time.Duration(last-o.end.UnixMicro())*time.Microsecond),
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
			if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
				return cause // the caller's context ended first: a side exited, say
			}
			return fmt.Errorf("not within %s", timeout)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
