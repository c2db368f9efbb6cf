// Command bench measures flowrun draining a preloaded Redis stream with a no-op rule, beside a
// plain go-redis consumer (XREADGROUP COUNT 1000 + one XACK per batch) on the same redis-server in
// the same run, and prints both rates, their ratio and flowrun's peak RSS.
//
//	go run ./e2e/bench            # 200,000 entries
//	go run ./e2e/bench -n 50000
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

func main() {
	n := flag.Int("n", 200_000, "entries to preload and drain")
	batch := flag.Int("batch", 1000, "flowrun source batch (the plain loop reads 1000)")
	concurrency := flag.Int("concurrency", 0, "flowrun concurrency (0: number of CPUs)")
	flag.Parse()
	if err := run(*n, *batch, *concurrency); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, batch, concurrency int) error {
	ctx := context.Background()
	srv, stop, err := redistest.StartMain()
	if err != nil {
		return err
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()

	tmp, err := os.MkdirTemp("", "flowrun-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "flowrun")
	build := exec.Command("go", "build", "-o", bin, "./cmd/flowrun")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build flowrun (run from the repository root): %w", err)
	}

	for _, stream := range []string{"bench:plain", "bench:flowrun"} {
		if err := preload(ctx, rdb, stream, n); err != nil {
			return err
		}
	}
	fmt.Printf("redis-server %s, %d entries each, payload %q\n", srv.Addr, n, payload(1))

	plain, err := drainPlain(ctx, rdb, "bench:plain", n)
	if err != nil {
		return err
	}
	fmt.Printf("plain go-redis  %9.0f msg/s  (%v)\n", float64(n)/plain.Seconds(), plain.Round(time.Millisecond))

	took, rss, err := drainFlowrun(ctx, rdb, bin, tmp, srv.URL, "bench:flowrun", n, batch, concurrency)
	if err != nil {
		return err
	}
	fmt.Printf("flowrun         %9.0f msg/s  (%v, peak RSS %.1f MiB)\n", float64(n)/took.Seconds(), took.Round(time.Millisecond), float64(rss)/1024)
	fmt.Printf("ratio           %9.2f  (flowrun / plain)\n", plain.Seconds()/took.Seconds())
	return nil
}

func payload(i int) string { return fmt.Sprintf(`{"id":%d,"amount":12,"currency":"EUR"}`, i) }

func preload(ctx context.Context, rdb *redis.Client, stream string, n int) error {
	for i := 0; i < n; i += 1000 {
		p := rdb.Pipeline()
		for j := i; j < min(i+1000, n); j++ {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"payload", payload(j)}})
		}
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("preload %s: %w", stream, err)
		}
	}
	return nil
}

func drainPlain(ctx context.Context, rdb *redis.Client, stream string, n int) (time.Duration, error) {
	if err := rdb.XGroupCreateMkStream(ctx, stream, "g", "0").Err(); err != nil {
		return 0, err
	}
	start := time.Now()
	for done := 0; done < n; {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{stream, ">"}, Count: 1000, Block: time.Second}).Result()
		if err != nil {
			return 0, fmt.Errorf("plain xreadgroup: %w", err)
		}
		ids := make([]string, 0, 1000)
		for _, s := range res {
			for _, m := range s.Messages {
				ids = append(ids, m.ID)
			}
		}
		if err := rdb.XAck(ctx, stream, "g", ids...).Err(); err != nil {
			return 0, fmt.Errorf("plain xack: %w", err)
		}
		done += len(ids)
	}
	return time.Since(start), nil
}

func drainFlowrun(ctx context.Context, rdb *redis.Client, bin, dir, url, stream string, n, batch, concurrency int) (time.Duration, int64, error) {
	conc := ""
	if concurrency > 0 {
		conc = fmt.Sprintf("  concurrency = %d\n", concurrency)
	}
	cfg := fmt.Sprintf(`redis "bench" {
  url = %q
}

pipeline "bench" {
  source "stream" {
    stream = %q
    group  = "g"
    batch  = %d
  }
%s  rule "noop" {
    outcome = "ack"
  }
}
`, url, stream, batch, conc)
	path := filepath.Join(dir, "bench.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return 0, 0, err
	}
	cmd := exec.Command(bin, "run", "--log-level", "warn", path)
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer cmd.Process.Kill()
	var rss int64
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if r := peakRSS(cmd.Process.Pid); r > rss {
			rss = r
		}
		if drained(ctx, rdb, stream, n) {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("flowrun did not drain %d entries in 5 minutes", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	if r := peakRSS(cmd.Process.Pid); r > rss {
		rss = r
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	return took, rss, nil
}

// drained reports whether the group has read every entry and has nothing pending.
func drained(ctx context.Context, rdb *redis.Client, stream string, n int) bool {
	groups, err := rdb.XInfoGroups(ctx, stream).Result()
	if err != nil || len(groups) == 0 {
		return false
	}
	g := groups[0]
	return g.EntriesRead >= int64(n) && g.Pending == 0
}

// peakRSS reads VmHWM (KiB) from /proc; 0 where it cannot.
func peakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
