package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

const (
	// pollEvery is how often the observer asks Redis how far a side has got.
	pollEvery = 2 * time.Millisecond
	// stallAfter ends a measurement that has made no progress for this long.
	stallAfter = 30 * time.Second
	// preloadChunk is how many writes one preload pipeline carries.
	preloadChunk = 1000
)

// span is what one side did between the observer's first sight of progress and its sight of
// the end: count messages settled in took. redis is the CPU time redis-server spent over the
// side's whole run (start-up and the observer's polls included).
type span struct {
	count int64
	took  time.Duration
	total int64 // messages of the whole run
	redis time.Duration
	// cpu is the side's process CPU time (user + system) over the span only, from /proc/<pid>/stat
	// read at the span's first and last poll: process start, config load and shutdown stay out,
	// as they do of the rate. ProcessState.SysUsage after exit would count them too.
	cpu time.Duration
}

// cpuPerMsg is the side's process CPU time per message of the span.
func (s span) cpuPerMsg() time.Duration {
	if s.count == 0 {
		return 0
	}
	return s.cpu / time.Duration(s.count)
}

// redisPerMsg is the redis-server CPU time per message of the whole run.
func (s span) redisPerMsg() time.Duration {
	if s.total == 0 {
		return 0
	}
	return s.redis / time.Duration(s.total)
}

func (s span) rate() float64 {
	if s.took <= 0 {
		return 0
	}
	return float64(s.count) / s.took.Seconds()
}

// progressFunc reports how many messages a side has settled so far, as Redis sees it.
type progressFunc func(ctx context.Context) (int64, error)

// measure times one side the same way for both: it polls progress every pollEvery until it
// reaches total and returns the messages settled after the first poll that saw any, and the time
// from that poll to the one that saw total, and process pid's CPU time between the two. Start-up (flowrun's process start, config load,
// connecting; the plain consumer's first read) is outside the span on both sides, and each end
// is seen within one poll.
func measure(ctx context.Context, pid int, total int64, progress progressFunc) (span, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var (
		t0       time.Time
		s0       int64
		cpu0     time.Duration
		last     int64
		lastMove = time.Now()
	)
	for {
		s, err := progress(ctx)
		now := time.Now()
		if err != nil {
			if c := context.Cause(ctx); c != nil {
				return span{}, c
			}
			return span{}, err
		}
		if s > 0 && t0.IsZero() {
			t0, s0, cpu0 = now, s, procCPU(pid)
		}
		if s >= total {
			if s0 >= total {
				return span{}, fmt.Errorf("all %d settled before the first poll: too few to time, raise -n", total)
			}
			return span{count: total - s0, took: now.Sub(t0), total: total, cpu: procCPU(pid) - cpu0}, nil
		}
		if s != last {
			last, lastMove = s, now
		} else if now.Sub(lastMove) > stallAfter {
			return span{}, fmt.Errorf("no progress for %s: %d of %d settled", stallAfter, s, total)
		}
		select {
		case <-ctx.Done():
			return span{}, fmt.Errorf("%d of %d settled: %w", s, total, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// plainConsumers are the plain consumers by the role a bench child plays (runPlainChild): each
// handles n messages of key (and of the keys named after it) on b.rdb, b.o.batch a read.
var plainConsumers = map[string]func(b *bench, ctx context.Context, key string, n int64) error{
	"readack": (*bench).plainReadAck,
	"rules": func(b *bench, ctx context.Context, key string, n int64) error {
		return b.plainRules(ctx, key, key+":out", n)
	},
	"list": func(b *bench, ctx context.Context, key string, n int64) error {
		return b.plainList(ctx, key, key+":processing", n)
	},
	"autoclaim": (*bench).plainAutoclaim,
	"workflow":  (*bench).plainWorkflow,
}

// timePlain runs the plain consumer role on key in a child process (this binary again) and
// measures it as flowrun is measured: a process of its own, so that both sides pay process
// start and connecting the same way and their CPU time is read the same way. The child
// handles n messages, then waits for SIGTERM.
func (b *bench) timePlain(ctx context.Context, total int64, progress progressFunc, role, key string, n int64) (span, error) {
	cpu0, err := b.redisCPU(ctx)
	if err != nil {
		return span{}, err
	}
	defer b.commandStats(ctx, "plain")()
	exe, err := os.Executable()
	if err != nil {
		return span{}, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=plain", "BENCH_ROLE="+role, "BENCH_ADDR="+b.srv.Addr,
		"BENCH_KEY="+key, "BENCH_N="+strconv.FormatInt(n, 10), "BENCH_BATCH="+strconv.Itoa(b.o.batch))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return span{}, fmt.Errorf("start the plain consumer: %w", err)
	}
	mctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		cancel(fmt.Errorf("plain consumer exited early: %v", err))
		exited <- err
	}()
	sp, err := measure(mctx, cmd.Process.Pid, total, progress)
	cmd.Process.Signal(syscall.SIGTERM)
	if werr := <-exited; werr != nil && err == nil {
		err = fmt.Errorf("plain consumer: %w", werr)
	}
	if err != nil {
		return span{}, err
	}
	cpu1, err := b.redisCPU(ctx)
	sp.redis = cpu1 - cpu0
	return sp, err
}

// runPlainChild is the plain consumer child of timePlain: the role, server, key, n and batch its
// environment names. It exits 0 on SIGTERM once done (or stopped), else with the consumer's error.
func runPlainChild() error {
	consume, ok := plainConsumers[os.Getenv("BENCH_ROLE")]
	if !ok {
		return fmt.Errorf("unknown plain consumer %q", os.Getenv("BENCH_ROLE"))
	}
	batch, err1 := strconv.Atoi(os.Getenv("BENCH_BATCH"))
	n, err2 := strconv.ParseInt(os.Getenv("BENCH_N"), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	b := &bench{o: options{batch: batch}, rdb: redis.NewClient(&redis.Options{Addr: os.Getenv("BENCH_ADDR")})}
	defer b.rdb.Close()
	if err := consume(b, ctx, os.Getenv("BENCH_KEY"), n); err != nil && ctx.Err() == nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// procCPU is process pid's user + system CPU time so far, from /proc/<pid>/stat (in USER_HZ
// ticks, 100 a second on Linux); 0 where it cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may hold spaces: state is
	// the first, utime and stime (fields 14 and 15 of proc(5)) the 12th and 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100
}

// timeFlowrun runs flowrun with cfg, measures it and stops it; it returns the span and flowrun's
// peak RSS in KiB.
func (b *bench) timeFlowrun(name, cfg string, total int64, progress progressFunc) (span, int64, error) {
	cpu0, err := b.redisCPU(context.Background())
	if err != nil {
		return span{}, 0, err
	}
	defer b.commandStats(context.Background(), name+" flowrun")()
	p, err := b.startFlowrun(name, cfg, nil)
	if err != nil {
		return span{}, 0, err
	}
	sp, err := measure(p.ctx, p.cmd.Process.Pid, total, progress)
	if err != nil {
		p.kill()
		return span{}, 0, fmt.Errorf("flowrun: %w", err)
	}
	rss, err := p.stop()
	if err != nil {
		return span{}, 0, err
	}
	cpu1, err := b.redisCPU(context.Background())
	sp.redis = cpu1 - cpu0
	return sp, rss, err
}

// commandStats, with -cmdstats, resets Redis's command statistics and returns a func that
// prints them: what each command cost Redis over one side's run (the observer's polls included).
func (b *bench) commandStats(ctx context.Context, side string) func() {
	if !b.o.cmdstats {
		return func() {}
	}
	if err := b.obs.ConfigResetStat(ctx).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: config resetstat:", err)
		return func() {}
	}
	return func() {
		info, err := b.obs.InfoMap(ctx, "commandstats").Result()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: info commandstats:", err)
			return
		}
		type stat struct {
			name         string
			calls, usec  int64
			usecPerCalls float64
		}
		var stats []stat
		for k, v := range info["Commandstats"] {
			st := stat{name: strings.TrimPrefix(k, "cmdstat_")}
			for _, f := range strings.Split(v, ",") {
				kv := strings.SplitN(f, "=", 2)
				if len(kv) != 2 {
					continue
				}
				switch kv[0] {
				case "calls":
					st.calls, _ = strconv.ParseInt(kv[1], 10, 64)
				case "usec":
					st.usec, _ = strconv.ParseInt(kv[1], 10, 64)
				case "usec_per_call":
					st.usecPerCalls, _ = strconv.ParseFloat(kv[1], 64)
				}
			}
			stats = append(stats, st)
		}
		slices.SortFunc(stats, func(a, b stat) int { return int(b.usec - a.usec) })
		fmt.Printf("  %s: Redis commands\n", side)
		for _, st := range stats {
			fmt.Printf("    %-14s %9d calls %10.1f ms %9.1f µs/call\n", st.name, st.calls, float64(st.usec)/1000, st.usecPerCalls)
		}
	}
}

// redisCPU is redis-server's CPU time so far.
func (b *bench) redisCPU(ctx context.Context) (time.Duration, error) {
	return redistest.ServerCPU(ctx, b.obs)
}

// streamSettled counts what a consumer group has read and acknowledged: entries-read − pending.
// A group that does not exist yet has settled nothing.
func streamSettled(rdb *redis.Client, stream, group string) progressFunc {
	return func(ctx context.Context) (int64, error) {
		gs, err := rdb.XInfoGroups(ctx, stream).Result()
		if err != nil && !isNoSuchKey(err) {
			return 0, err
		}
		for _, g := range gs {
			if g.Name == group {
				return g.EntriesRead - g.Pending, nil
			}
		}
		return 0, nil
	}
}

// pendingSettled counts, of n entries pending at the start, those no longer pending.
func pendingSettled(rdb *redis.Client, stream, group string, n int64) progressFunc {
	return func(ctx context.Context) (int64, error) {
		gs, err := rdb.XInfoGroups(ctx, stream).Result()
		if err != nil {
			return 0, err
		}
		for _, g := range gs {
			if g.Name == group {
				return n - g.Pending, nil
			}
		}
		return 0, fmt.Errorf("group %s of %s is gone", group, stream)
	}
}

// listSettled counts, of n elements preloaded, those neither in the list nor in processing.
func listSettled(rdb *redis.Client, key, processing string, n int64) progressFunc {
	return func(ctx context.Context) (int64, error) {
		var a, b *redis.IntCmd
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			a, b = p.LLen(ctx, key), p.LLen(ctx, processing)
			return nil
		})
		if err != nil {
			return 0, err
		}
		return n - a.Val() - b.Val(), nil
	}
}

func isNoSuchKey(err error) bool {
	return err != nil && (err.Error() == "ERR no such key" || errors.Is(err, redis.Nil))
}

// order is the payload every workload's messages carry.
type order struct {
	ID       int     `json:"id"`
	Amount   float64 `json:"amount"`
	Currency string  `json:"currency"`
	Customer string  `json:"customer"`
}

var currencies = [...]string{"EUR", "USD", "GBP", "CHF", "JPY"}

// orderFor is entry i's payload. Amounts run over 0.5 … 99.5 and every fifth entry is in EUR, so
// that exactly one entry in ten (of every hundred consecutive ones) has amount > 50 in EUR.
func orderFor(i int) order {
	return order{ID: i, Amount: float64(i*37%100) + 0.5, Currency: currencies[i%len(currencies)], Customer: fmt.Sprintf("c%02d", i%100)}
}

// payload is entry i's payload as JSON text.
func payload(i int) string {
	o := orderFor(i)
	return `{"id":` + strconv.Itoa(o.ID) + `,"amount":` + strconv.FormatFloat(o.Amount, 'f', -1, 64) +
		`,"currency":"` + o.Currency + `","customer":"` + o.Customer + `"}`
}

// preloadStreams appends n entries (one field, payload) to each stream.
func preloadStreams(ctx context.Context, rdb *redis.Client, n int, streams ...string) error {
	for _, stream := range streams {
		for i := 0; i < n; i += preloadChunk {
			p := rdb.Pipeline()
			for j := i; j < min(i+preloadChunk, n); j++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"payload", payload(j)}})
			}
			if _, err := p.Exec(ctx); err != nil {
				return fmt.Errorf("preload %s: %w", stream, err)
			}
		}
	}
	return nil
}

// messageIDs lists the ids of an XREADGROUP reply.
func messageIDs(res []redis.XStream) []string {
	var ids []string
	for _, s := range res {
		for _, m := range s.Messages {
			ids = append(ids, m.ID)
		}
	}
	return ids
}
