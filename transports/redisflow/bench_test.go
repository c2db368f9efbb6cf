package redisflow

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

// BenchmarkRound measures what a round costs this process per message, as the bench's flow
// workload sends them: a batch of admissions of each block, then their releases (one in ten a
// retry). cpu-ns/msg is this process's CPU (user + system), redis-ns/msg the server's.
func BenchmarkRound(b *testing.B) {
	const batch = 256
	blocks := map[string]func(i int, a *engine.FlowAdmit){
		"dedupe": func(i int, a *engine.FlowAdmit) { a.Dedupe = "d:" + strconv.Itoa(i) },
		"concurrency": func(i int, a *engine.FlowAdmit) {
			a.Conc, a.ConcLimit = "c:c"+strconv.Itoa(i%100), batch
		},
		"throttle": func(i int, a *engine.FlowAdmit) {
			a.Throttle, a.ThrottleLimit, a.Period = "t:c"+strconv.Itoa(i%100), 1_000_000, time.Second
		},
	}
	for _, name := range []string{"dedupe", "concurrency", "throttle"} {
		b.Run(name, func(b *testing.B) {
			_, c := redistest.Fresh(b)
			s := New(c, "bench")
			ctx := context.Background()
			seq := 0
			cpu0, redis0 := transporttest.CPUTime(), redisCPU(b, c)
			b.ReportAllocs()
			for b.Loop() {
				r := &engine.FlowRound{Lease: 30 * time.Second, Max: batch}
				for range batch {
					seq++
					a := engine.FlowAdmit{Token: "tok:" + strconv.Itoa(seq)}
					blocks[name](seq, &a)
					r.Admits = append(r.Admits, a)
				}
				if err := s.Round(ctx, r); err != nil {
					b.Fatal(err)
				}
				rel := &engine.FlowRound{Lease: 30 * time.Second}
				for i, a := range r.Admits {
					x := engine.FlowRelease{FlowLease: engine.FlowLease{Token: a.Token, Conc: a.Conc, Dedupe: a.Dedupe}}
					if a.Dedupe != "" && i%10 != 0 {
						x.Window = time.Hour
					}
					rel.Releases = append(rel.Releases, x)
				}
				if err := s.Round(ctx, rel); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(transporttest.CPUTime()-cpu0)/float64(b.N*batch), "cpu-ns/msg")
			b.ReportMetric(float64(redisCPU(b, c)-redis0)/float64(b.N*batch), "redis-ns/msg")
		})
	}
}

// redisCPU is the server's CPU time so far.
func redisCPU(b *testing.B, c redis.UniversalClient) time.Duration {
	d, err := redistest.ServerCPU(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return d
}
