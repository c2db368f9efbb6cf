package main

import (
	"cmp"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// row is one throughput comparison: both sides on the same work.
type row struct {
	name    string
	plain   span
	flowrun span
	rss     int64 // flowrun's peak RSS in KiB
	// baseline, when set, says what the left side is instead of a plain consumer: the flow
	// workload compares flowrun with a block to flowrun without it.
	baseline string
	// unit is what the row counts when not messages ("run": the workflow workload), and target
	// its own least ratio when not minRatio.
	unit   string
	target float64
}

func (r row) ratio() float64 { return r.flowrun.rate() / r.plain.rate() }

// cpuRatio is flowrun's process CPU per message over the plain consumer's.
func (r row) cpuRatio() float64 { return ratioOf(r.flowrun.cpuPerMsg(), r.plain.cpuPerMsg()) }

// The targets of a throughput row (issue 29): flowrun at no less than minRatio of the plain
// consumer's rate, at no more than maxCPURatio of its process CPU per message.
const (
	minRatio    = 0.90
	maxCPURatio = 1.25
)

// maxFlowCPURatio is the flow rows' target (issue 29): a flow-control block costs at most 1.3×
// the process CPU per message of the same pipeline without it. Those rows have no rate target.
const maxFlowCPURatio = 1.30

// misses flags, for the table, a target the row misses; "" where it meets both.
func (r row) misses() string {
	if r.baseline != "" {
		if r.cpuRatio() > maxFlowCPURatio {
			return fmt.Sprintf("  <- CPU > %.2f×", maxFlowCPURatio)
		}
		return ""
	}
	if r.target > 0 {
		// A row with a target of its own (workflow: issue 27) is held to that rate alone: its
		// plain program does less work per run than flowrun must (it never loads the run).
		if r.ratio() < r.target {
			return fmt.Sprintf("  <- below %.2f", r.target)
		}
		return ""
	}
	var s string
	if r.ratio() < minRatio {
		s += fmt.Sprintf("  <- below %.2f", minRatio)
	}
	if r.cpuRatio() > maxCPURatio {
		s += fmt.Sprintf("  <- CPU > %.2f×", maxCPURatio)
	}
	return s
}

// latencyRow is the latency workload's comparison at one offered rate.
type latencyRow struct {
	name    string
	offered float64 // XADDs per second actually sent, averaged over both sides
	plain   latencies
	flowrun latencies
	rss     int64 // flowrun's peak RSS in KiB
}

// latencies are the percentiles of one side's XADD → handler times.
type latencies struct {
	samples        int
	p50, p99, p999 time.Duration
	// behind is how long after the producer stopped the last entry was handled: more than a
	// few milliseconds means the side did not keep up with the offered rate, and its
	// percentiles measure a queue that grew with -duration.
	behind time.Duration
	// cpu is the consumer process's CPU time per entry offered to it, warm-up included: on a
	// machine that Redis and the producer share, a consumer's CPU delays them too.
	cpu time.Duration
	// late is the share of the samples the producer sent late, in one backlog pipeline, after
	// a stall of its own: such entries reach the consumer all at once, so each waits for the
	// handling of those before it, and the tail measures bursts more than a steady rate.
	late float64
}

// fellBehind is behind's threshold for the warning in the table.
const fellBehind = 50 * time.Millisecond

// results is what workloads return and the final table shows.
type results struct {
	rows []row
	lat  []latencyRow
}

func (r *results) add(o results) {
	r.rows = append(r.rows, o.rows...)
	r.lat = append(r.lat, o.lat...)
}

// medians combines runs of one workload, row by row: each side's median rate (of an even number,
// the lower middle), the highest peak RSS; for latency, each side's run with the median p99.
func medians(runs []results) results {
	if len(runs) == 1 {
		return runs[0]
	}
	var out results
	for i := range runs[0].rows {
		var plain, flow []span
		first := runs[0].rows[i]
		r := row{name: first.name, baseline: first.baseline, unit: first.unit, target: first.target}
		for _, run := range runs {
			x := run.rows[i]
			plain, flow = append(plain, x.plain), append(flow, x.flowrun)
			r.rss = max(r.rss, x.rss)
		}
		r.plain, r.flowrun = median(plain, span.rate), median(flow, span.rate)
		out.rows = append(out.rows, r)
	}
	for i := range runs[0].lat {
		var plain, flow []latencies
		l := latencyRow{name: runs[0].lat[i].name}
		for _, run := range runs {
			x := run.lat[i]
			plain, flow = append(plain, x.plain), append(flow, x.flowrun)
			l.rss = max(l.rss, x.rss)
			l.offered += x.offered / float64(len(runs))
		}
		p99 := func(l latencies) float64 { return float64(l.p99) }
		l.plain, l.flowrun = median(plain, p99), median(flow, p99)
		out.lat = append(out.lat, l)
	}
	return out
}

// median returns the element of xs with the median key (the lower middle of an even count).
func median[T any](xs []T, key func(T) float64) T {
	s := slices.Clone(xs)
	slices.SortFunc(s, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return s[(len(s)-1)/2]
}

// report prints a row as soon as it is measured.
func (r row) report() {
	if r.baseline != "" {
		fmt.Printf("%-17s %s %s, with it %s, ratio %.2f, CPU/msg %.2f×, peak RSS %s\n",
			r.name, r.baseline, r.plain, r.flowrun, r.ratio(), r.cpuRatio(), mib(r.rss))
		return
	}
	unit := cmp.Or(r.unit, "msg")
	fmt.Printf("%-17s plain %s, flowrun %s, ratio %.2f, flowrun peak RSS %s\n",
		r.name, r.plain.in(unit), r.flowrun.in(unit), r.ratio(), mib(r.rss))
}

func (s span) String() string { return s.in("msg") }

// in describes the span counting unit ("msg", "run").
func (s span) in(unit string) string {
	return fmt.Sprintf("%s %s/s (%d in %s, CPU %s/%s, Redis CPU %s/%s)", thousands(s.rate()), unit, s.count, s.took.Round(time.Millisecond), micros1(s.cpuPerMsg()), unit, micros1(s.redisPerMsg()), unit)
}

func (l latencies) String() string {
	return fmt.Sprintf("p50 %s p99 %s p99.9 %s (%d samples, %s sent late in backlogs; last handled %s after the last XADD), CPU %s per entry",
		micros(l.p50), micros(l.p99), micros(l.p999), l.samples, percent(l.late), l.behind.Round(time.Millisecond), micros1(l.cpu))
}

// note warns when a side did not keep up.
func (l latencies) note() string {
	if l.behind > fellBehind {
		return fmt.Sprintf("   did not keep up: %s behind at the end", l.behind.Round(time.Millisecond))
	}
	return ""
}

// print writes the final tables.
func (r results) print(w io.Writer, o options) {
	if slices.ContainsFunc(r.rows, func(x row) bool { return x.baseline == "" }) {
		fmt.Fprintf(w, "%-17s %13s %15s %7s %18s   %-30s   %s\n", "workload", "plain msg/s", "flowrun msg/s", "ratio", "flowrun peak RSS", "Redis CPU/msg: plain, flowrun", "CPU/msg: plain, flowrun (ratio)")
		for _, x := range r.rows {
			if x.baseline != "" {
				continue
			}
			redisCPU := micros1(x.plain.redisPerMsg()) + ", " + micros1(x.flowrun.redisPerMsg())
			fmt.Fprintf(w, "%-17s %13s %15s %7.2f %18s   %-30s   %s, %s (%.2f×)%s\n", x.name, thousands(x.plain.rate()), thousands(x.flowrun.rate()), x.ratio(), mib(x.rss),
				redisCPU, micros1(x.plain.cpuPerMsg()), micros1(x.flowrun.cpuPerMsg()), x.cpuRatio(), x.misses())
		}
		if slices.ContainsFunc(r.rows, func(x row) bool { return x.unit == "run" }) {
			fmt.Fprintf(w, "(workflow: per run of three steps, not per message; its target is %.2f of the plain program)\n", wfMinRatio)
		}
	}
	first := true
	for _, x := range r.rows {
		if x.baseline == "" {
			continue
		}
		if first {
			first = false
			if slices.ContainsFunc(r.rows, func(x row) bool { return x.baseline == "" }) {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%-22s %15s %15s %7s %18s   %-30s   %s\n", "flowrun, rules with", "without msg/s", "with msg/s", "ratio", "peak RSS (with)", "Redis CPU/msg: without, with", "CPU/msg: without, with (ratio)")
		}
		redisCPU := micros1(x.plain.redisPerMsg()) + ", " + micros1(x.flowrun.redisPerMsg())
		fmt.Fprintf(w, "%-22s %15s %15s %7.2f %18s   %-30s   %s, %s (%.2f×)%s\n", x.name, thousands(x.plain.rate()), thousands(x.flowrun.rate()), x.ratio(), mib(x.rss),
			redisCPU, micros1(x.plain.cpuPerMsg()), micros1(x.flowrun.cpuPerMsg()), x.cpuRatio(), x.misses())
	}
	for _, l := range r.lat {
		if len(r.rows) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%-17s %9s %9s %9s %10s %6s %18s   (XADD → handler, %s msg/s offered for %s)\n",
			l.name, "p50", "p99", "p99.9", "CPU/entry", "late", "flowrun peak RSS", thousands(l.offered), o.duration)
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("%-17s %9s %9s %9s %10s %6s %18s%s", "plain", micros(l.plain.p50), micros(l.plain.p99), micros(l.plain.p999), micros1(l.plain.cpu), percent(l.plain.late), "", l.plain.note()), " "))
		fmt.Fprintf(w, "%-17s %9s %9s %9s %10s %6s %18s%s\n", "flowrun", micros(l.flowrun.p50), micros(l.flowrun.p99), micros(l.flowrun.p999), micros1(l.flowrun.cpu), percent(l.flowrun.late), mib(l.rss), l.flowrun.note())
		fmt.Fprintf(w, "%-17s %9.2f× %8.2f× %8.2f× %9.2f×\n", "flowrun / plain",
			ratioOf(l.flowrun.p50, l.plain.p50), ratioOf(l.flowrun.p99, l.plain.p99), ratioOf(l.flowrun.p999, l.plain.p999), ratioOf(l.flowrun.cpu, l.plain.cpu))
		if l.plain.p99 > machineStalled {
			fmt.Fprintf(w, "(plain's p99 is over %s: the machine stalled during this run, and the ratios say more about it than about flowrun)\n", machineStalled)
		}
		if max(l.plain.late, l.flowrun.late) > lateBursts {
			fmt.Fprintf(w, "(over %s of a side's entries came late, in the producer's backlog bursts: its p99 is a burst's, each entry waiting for the handling of those before it)\n", percent(lateBursts))
		}
	}
}

// machineStalled is the plain side's p99 above which the latency table warns that the machine
// itself stalled: the plain loop is one goroutine doing two round trips per batch, and on a quiet
// machine its p99 at 10,000 msg/s stays at a few hundred µs.
const machineStalled = time.Millisecond

// lateBursts is the share of late entries (latencies.late) above which a side's p99 falls among
// them.
const lateBursts = 0.01

func ratioOf(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// thousands prints a rate rounded to a whole number with thousands separators: 414,237.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// micros prints a duration in whole microseconds: "561 µs".
func micros(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

// micros1 prints a short duration in microseconds with one decimal: "1.2 µs".
func micros1(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

// percent prints a share as a percentage with one decimal: "12.5 %".
func percent(f float64) string { return fmt.Sprintf("%.1f %%", 100*f) }

// mib prints KiB as MiB.
func mib(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

func numCPU() int { return runtime.NumCPU() }
