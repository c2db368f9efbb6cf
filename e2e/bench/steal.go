package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// cpuTimes is the machine's first /proc/stat line: the CPU time spent in each state, in ticks.
type cpuTimes struct{ total, steal uint64 }

// readCPUTimes reads /proc/stat; ok is false where there is none (not Linux).
func readCPUTimes() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	return parseCPUTimes(b)
}

// parseCPUTimes reads "cpu user nice system idle iowait irq softirq steal …" (guest times,
// which user already includes, are left out of the total).
func parseCPUTimes(b []byte) (cpuTimes, bool) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return cpuTimes{}, false
	}
	var t cpuTimes
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil {
			return cpuTimes{}, false
		}
		t.total += v
		if i == 7 {
			t.steal = v
		}
	}
	return t, true
}

// stealShare is the share of the CPUs' time the hypervisor gave to others between a and b: time
// when this machine's processes were ready to run and did not.
func stealShare(a, b cpuTimes) float64 {
	if b.total <= a.total {
		return 0
	}
	return float64(b.steal-a.steal) / float64(b.total-a.total)
}

// stealNote is "; steal time N%" since a, for a latency row or the final footer, or "" where
// /proc/stat cannot be read.
func stealNote(a cpuTimes, ok bool) string {
	b, ok2 := readCPUTimes()
	if !ok || !ok2 {
		return ""
	}
	return fmt.Sprintf("; steal time %.0f%%", 100*stealShare(a, b))
}
