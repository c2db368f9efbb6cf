package redisflow

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
)

func redisCPUExp(c interface {
	Info(context.Context, ...string) interface{ Val() string }
}) {
}

func TestZZExp(t *testing.T) {
	if os.Getenv("EXP") == "" {
		t.Skip()
	}
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	s := New(c, "rules")
	per, _ := strconv.Atoi(os.Getenv("PER"))
	if per == 0 {
		per = 64
	}
	block := os.Getenv("EXP")
	cpu := func() float64 {
		info := c.Info(ctx, "cpu").Val()
		var tot float64
		for _, l := range strings.Split(info, "\r\n") {
			for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
				if strings.HasPrefix(l, f) {
					v, _ := strconv.ParseFloat(strings.TrimPrefix(l, f), 64)
					tot += v
				}
			}
		}
		return tot
	}
	c.ConfigResetStat(ctx)
	c0 := cpu()
	begin := time.Now()
	n := 110000
	seq := 0
	var prev []engine.FlowAdmit
	for done := 0; done < n; done += per {
		r := &engine.FlowRound{Lease: 30 * time.Second, Max: per}
		for _, a := range prev {
			r.Releases = append(r.Releases, engine.FlowRelease{FlowLease: engine.FlowLease{Token: a.Token, Conc: a.Conc, Dedupe: a.Dedupe}, Window: time.Hour})
		}
		prev = nil
		for i := 0; i < per; i++ {
			seq++
			cust := fmt.Sprintf("c%02d", rand.Intn(100))
			a := engine.FlowAdmit{Token: "abcdef012345:" + strconv.FormatInt(int64(seq), 36)}
			switch block {
			case "throttle":
				a.Throttle, a.ThrottleLimit, a.Period = "t:"+cust, 1000000, time.Second
			case "conc":
				a.Conc, a.ConcLimit = "c:"+cust, 1000
			case "dedupe":
				a.Dedupe = "d:" + strconv.Itoa(seq)
			}
			r.Admits = append(r.Admits, a)
		}
		if err := s.Round(ctx, r); err != nil {
			t.Fatal(err)
		}
		prev = r.Admits
	}
	el := time.Since(begin)
	c1 := cpu()
	fmt.Printf("%s per=%d: %d admissions in %v (%.0f/s), Redis CPU %.2f µs/admission\n", block, per, n, el, float64(n)/el.Seconds(), (c1-c0)*1e6/float64(n))
	for _, l := range strings.Split(c.Info(ctx, "commandstats").Val(), "\r\n") {
		if strings.HasPrefix(l, "cmdstat_") {
			fmt.Println(l)
		}
	}
}
