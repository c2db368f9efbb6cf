// Command bench measures flowrun on real workloads, each beside a hand-written go-redis consumer
// that sends the same Redis commands, on the same redis-server, in the same run. It prints both
// rates, their ratio, flowrun's peak RSS, Redis's and each side's own process CPU time per message
// (the plain consumer runs in a child process, as flowrun does), and for the latency
// workload p50/p99/p99.9 of the time from XADD to handler at a fixed offered rate, with the
// handler only acknowledging (latency) and emitting to a stream (latency-emit). See docs/benchmarks.md,
// "Workloads", for what each side of each workload sends.
//
//	go run ./e2e/bench                               # every workload, 200,000 entries each
//	go run ./e2e/bench -workload rules,list -n 50000
//	go run ./e2e/bench -workload latency -rate 5000 -duration 10s
//	go run ./e2e/bench -workload rules -cpuprofile /tmp/prof   # flowrun writes /tmp/prof/rules.pprof
//	go run ./e2e/bench -workload flow -n 50000               # rules with each flow-control block, beside without
//	go run ./e2e/bench -workload workflow -n 100000          # n/4 runs of three steps, runs per second
//
// It must run inside the flowrun module (it builds ./cmd/flowrun unless -bin names a binary).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// options are the command's flags.
type options struct {
	n           int           // entries per throughput workload
	batch       int           // entries per read, both sides
	concurrency int           // flowrun's concurrency; 0 leaves flowrun's default (CPUs)
	rate        int           // latency: offered XADDs per second
	duration    time.Duration // latency: how long each side is offered that rate
	runs        int           // runs of each workload; the table shows medians
	cpuprofile  string        // directory for flowrun CPU profiles; "" for none
	bin         string        // a flowrun binary to use instead of building ./cmd/flowrun
	trace       bool          // flowrun exports every span to a collector that discards them
	cmdstats    bool          // print Redis's per-command CPU time for each side
}

// workload is one selectable workload; run measures both sides and returns its rows.
type workload struct {
	name string
	run  func(ctx context.Context, b *bench) (results, error)
}

var workloads = []workload{
	{"noop", runNoop},
	{"rules", runRules},
	{"list", runList},
	{"claim", runClaim},
	{"latency", runLatency},
	{"flow", runFlow},
	{"workflow", runWorkflow},
}

func workloadNames() []string {
	names := make([]string, len(workloads))
	for i, w := range workloads {
		names[i] = w.name
	}
	return names
}

func main() {
	if os.Getenv(childEnv) != "" {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	sel := flag.String("workload", strings.Join(workloadNames(), ","), "comma-separated workloads to run: "+strings.Join(workloadNames(), ", "))
	flag.IntVar(&o.n, "n", 200_000, "entries per throughput workload (latency uses -rate and -duration)")
	flag.IntVar(&o.batch, "batch", 1000, "entries per read on both sides (flowrun's source batch, the plain consumers' COUNT)")
	flag.IntVar(&o.concurrency, "concurrency", 0, "flowrun concurrency (0: flowrun's default, the number of CPUs)")
	flag.IntVar(&o.rate, "rate", 10_000, "latency: XADDs offered per second")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "latency: how long each side is offered -rate (plus a 500ms warm-up)")
	flag.IntVar(&o.runs, "runs", 1, "run each workload this many times and show the median of each side (on a busy machine, 3)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of each flowrun run to DIR/<row>.pprof")
	flag.StringVar(&o.bin, "bin", "", "use this flowrun binary instead of building ./cmd/flowrun")
	flag.BoolVar(&o.trace, "trace", false, "flowrun exports traces (sample_ratio 1) to an OTLP/HTTP collector in this command that discards them")
	flag.BoolVar(&o.cmdstats, "cmdstats", false, "print each side's Redis commands: calls and Redis CPU time (INFO commandstats)")
	flag.Parse()
	selected, err := selectWorkloads(*sel)
	if err == nil {
		err = o.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := run(o, selected); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func (o *options) validate() error {
	switch {
	case o.n < 1:
		return fmt.Errorf("-n must be at least 1, got %d", o.n)
	case o.batch < 1:
		return fmt.Errorf("-batch must be at least 1, got %d", o.batch)
	case o.concurrency < 0:
		return fmt.Errorf("-concurrency must not be negative, got %d", o.concurrency)
	case o.rate < 1:
		return fmt.Errorf("-rate must be at least 1, got %d", o.rate)
	case o.runs < 1:
		return fmt.Errorf("-runs must be at least 1, got %d", o.runs)
	case o.duration < 100*time.Millisecond:
		return fmt.Errorf("-duration must be at least 100ms, got %s", o.duration)
	}
	return nil
}

func selectWorkloads(list string) ([]workload, error) {
	var out []workload
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(workloads, func(w workload) bool { return w.name == name })
		if i < 0 {
			return nil, fmt.Errorf("-workload: unknown workload %q (want %s)", name, strings.Join(workloadNames(), ", "))
		}
		if !slices.ContainsFunc(out, func(w workload) bool { return w.name == name }) {
			out = append(out, workloads[i])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-workload: no workload selected")
	}
	return out, nil
}

// bench is what every workload shares: the server, clients, the flowrun binary and the flags.
type bench struct {
	o   options
	srv *redistest.Server
	rdb *redis.Client // the plain consumers' client, also used for setup and checks
	obs *redis.Client // the observer's own client (measure)
	bin string        // the flowrun binary
	dir string        // scratch directory: configs, logs
	// collector is the OTLP/HTTP endpoint flowrun exports to with -trace; "" without.
	collector string
}

func run(o options, selected []workload) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "flowrun-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.cpuprofile != "" {
		if err := os.MkdirAll(o.cpuprofile, 0o755); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	bin := o.bin
	if bin == "" {
		if bin, err = buildFlowrun(dir, o.cpuprofile != ""); err != nil {
			return err
		}
	} else if o.cpuprofile != "" {
		return errors.New("-cpuprofile needs the binary this command builds; drop -bin")
	}

	srv, stop, err := redistest.StartMain()
	if err != nil {
		return err
	}
	defer stop()
	b := &bench{o: o, srv: srv, bin: bin, dir: dir,
		rdb: redis.NewClient(&redis.Options{Addr: srv.Addr}),
		obs: redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 1}),
	}
	defer b.rdb.Close()
	defer b.obs.Close()
	if o.trace {
		c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) // an empty protobuf reply: everything accepted
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		defer c.Close()
		b.collector = c.URL
	}
	info, _ := b.rdb.InfoMap(ctx, "server").Result()
	fmt.Printf("redis-server %s on %s; %d CPUs; -n %d -batch %d; payload %s\n",
		info["Server"]["redis_version"], srv.Addr, numCPU(), o.n, o.batch, payload(1))

	var all results
	started := time.Now()
	cpuAtStart, haveCPU := readCPUTimes()
	for _, w := range selected {
		var runs []results
		for range o.runs {
			res, err := w.run(ctx, b)
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			runs = append(runs, res)
			if err := b.rdb.FlushAll(ctx).Err(); err != nil {
				return fmt.Errorf("flushall after %s: %w", w.name, err)
			}
		}
		all.add(medians(runs))
	}
	fmt.Println()
	all.print(os.Stdout, o)
	runs := ""
	if o.runs > 1 {
		runs = fmt.Sprintf("medians of %d runs; ", o.runs)
	}
	fmt.Printf("\n(%s%d CPUs shared by redis-server, flowrun and this command; total %s%s)\n", runs, numCPU(), time.Since(started).Round(time.Second), stealNote(cpuAtStart, haveCPU))
	return nil
}
