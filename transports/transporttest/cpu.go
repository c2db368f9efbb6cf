package transporttest

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// CPUTime is this process's user and system CPU time so far: what a benchmark of a source's
// drain reports per message (cpu-ns/op), steadier than a rate on a shared machine.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// DrainCPU runs p in an engine until done is closed (settled says how far it got when that
// takes over a minute), stops it, and returns the process CPU time the drain took; the
// benchmark's timer runs over the drain alone.
func DrainCPU(b *testing.B, ctx context.Context, p *engine.Pipeline, done <-chan struct{}, settled func() int64) time.Duration {
	b.Helper()
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := CPUTime()
	go func() { ran <- engine.New(engine.Options{}, p).Run(runCtx) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("settled %d in a minute", settled())
	}
	cpu := CPUTime() - cpu0
	b.StopTimer()
	stop()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	return cpu
}
