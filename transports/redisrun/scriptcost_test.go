package redisrun

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/workflow"
)

// TestScriptCost (temporary): applyScript's server time per call, phase by phase.
func TestScriptCost(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	srv, rdb := redistest.Fresh(t)
	_ = srv
	ctx := context.Background()
	g := &workflow.Graph{Name: "bench", Retention: 7 * 24 * time.Hour, Steps: []workflow.StepDef{{Name: "one", Next: "two"}, {Name: "two", Next: "three"}, {Name: "three"}}}
	s := NewStore(rdb, g)
	applyScript.Load(ctx, rdb)
	const n = 20000
	states := make([]*workflow.State, n)
	phase := func(name string, op func(i int) applyOp) {
		rdb.ConfigResetStat(ctx)
		p := rdb.Pipeline()
		for i := 0; i < n; i++ {
			k, a := s.call(op(i))
			applyScript.EvalSha(ctx, p, k, a...)
			if p.Len() == 500 {
				if _, err := p.Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		p.Exec(ctx)
		for _, l := range strings.Split(rdb.Info(ctx, "commandstats").Val(), "\n") {
			if strings.Contains(l, "calls=") {
				f := strings.Split(l, ",")
				t.Logf("%s: %s %s", name, f[0], f[2])
			}
		}
	}
	phase("create", func(i int) applyOp {
		st, tr := g.Start(strconv.Itoa(i), []byte(`{"id":1,"amount":37.5,"currency":"USD","customer":"c01"}`), time.Now())
		states[i] = st
		return applyOp{create: st, t: tr}
	})
	for _, step := range []string{"one", "two", "three"} {
		phase(step, func(i int) applyOp {
			st := states[i]
			tr := g.Finish(st, nil, 1, "ack", time.Now())
			tr.HasOutput, tr.Output = true, []byte(strconv.Quote(step))
			prev := *st
			next := prev
			next.Visit++
			next.Step = tr.Enter
			states[i] = &next
			return applyOp{t: tr, prev: &prev}
		})
	}
	_ = redis.Nil
}

var wfStepScriptX = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'visit') == ARGV[2] then
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
  redis.call('RPUSH', KEYS[3], ARGV[5])
  redis.call('HINCRBY', KEYS[4], ARGV[3], -1)
  if ARGV[6] == '' then
    redis.call('HSET', KEYS[1], 'status', 'completed', 'step', '', 'finished', ARGV[10], 'updated_at', ARGV[7])
    redis.call('RPUSH', KEYS[3], ARGV[11])
    for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[12]) end
  else
    local v = tostring(tonumber(ARGV[2]) + 1)
    redis.call('HSET', KEYS[1], 'step', ARGV[6], 'visit', v, 'finished', ARGV[10], 'updated_at', ARGV[7])
    redis.call('HINCRBY', KEYS[4], ARGV[6], 1)
    redis.call('XADD', KEYS[6], '*', 'run', ARGV[1], 'visit', v)
  end
end
return 1
`)

func TestScriptCostPlain(t *testing.T) {
	srv, rdb := redistest.Fresh(t)
	_ = srv
	ctx := context.Background()
	wfStepScriptX.Load(ctx, rdb)
	const n = 20000
	for v := 1; v <= 3; v++ {
		rdb.ConfigResetStat(ctx)
		p := rdb.Pipeline()
		for i := 0; i < n; i++ {
			id := strconv.Itoa(i)
			if v == 1 {
				rdb.HSet(ctx, "flowrun:{bench}:run:"+id, "visit", "1")
			}
			nxt := "flowrun:{bench}:s:two"
			nstep := "two"
			if v == 3 {
				nstep = ""
			}
			ev := `{"step":"one","visit":1,"attempt":1,"outcome":"ack","at":"2026-12-03T15:28:12.038800602Z","error":""}`
			wfStepScriptX.EvalSha(ctx, p, []string{"flowrun:{bench}:run:" + id, "flowrun:{bench}:out:" + id, "flowrun:{bench}:hist:" + id, "flowrun:{bench}:active", "flowrun:{bench}:s:one", nxt},
				id, strconv.Itoa(v), "one", `"one"`, ev, nstep, "1796311692038", "bench", "1-1", `["one"]`, ev, "604800")
			if p.Len() == 500 {
				p.Exec(ctx)
			}
		}
		p.Exec(ctx)
		for _, l := range strings.Split(rdb.Info(ctx, "commandstats").Val(), "\n") {
			if strings.Contains(l, "evalsha") {
				f := strings.Split(l, ",")
				t.Logf("%d: %s %s", v, f[0], f[2])
			}
		}
	}
}
