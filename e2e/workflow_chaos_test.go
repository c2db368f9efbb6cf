package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	wfChaosRuns  = 300
	wfChaosKills = 6
	// wfChaosSettle bounds how long the runs may take to complete after the last restart: a
	// delivery pending in a killed consumer waits for a takeover.
	wfChaosSettle = 3 * time.Minute
)

var wfChaosSteps = []string{"one", "two", "three"}

// TestWorkflowChaos (issue 27, item 7): hundreds of three-step runs on two flowrun processes
// that share the workflow, while one or the other is killed with SIGKILL at random moments and
// restarted. Every run completes; each run's history shows each step finished exactly once, at
// its visit, in order; no step's handler was called before the step before it had finished; and
// every call of a visit, repeated or not, carried that visit's idempotency key.
func TestWorkflowChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos under -short")
	}
	e := newStreamEnv(t)
	srv := newWFServer(t, func(c wfCall) (int, string) {
		// A few milliseconds in the handler, so that kills land during calls too.
		time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond)
		var b wfBody
		json.Unmarshal([]byte(c.Body), &b)
		return http.StatusOK, fmt.Sprintf(`{"run":%q,"step":%q}`, b.Run, b.Step)
	})
	steps := ""
	for i, s := range wfChaosSteps {
		next := ""
		if i+1 < len(wfChaosSteps) {
			next = fmt.Sprintf("    next         = %q\n", wfChaosSteps[i+1])
		}
		steps += fmt.Sprintf(`
  step %q {
    handler "http" {
      url = %q
    }
    payload      = "{'run': run.id, 'step': run.step, 'visit': run.visit}"
    concurrency  = 8
    max_attempts = 1000
%s  }
`, s, srv.URL, next)
	}
	cfg := e.wfConfig(`workflow "chaos" {
  run_id = "payload.id"

  start {
    source "stream" {
      stream = "chaos.start"
      block  = "100ms"
      batch  = 20
    }
  }
` + steps + "}\n")

	procs := []*proc{start(t, "run", "--consumer", "w1", "--log-level", "warn", cfg), start(t, "run", "--consumer", "w2", "--log-level", "warn", cfg)}
	var feed sync.WaitGroup
	feed.Add(1)
	go func() {
		defer feed.Done()
		for i := range wfChaosRuns {
			e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: "chaos.start", Values: []string{"payload", fmt.Sprintf(`{"id":"r%03d"}`, i)}})
			time.Sleep(15 * time.Millisecond)
		}
	}()
	for k := range wfChaosKills {
		time.Sleep(time.Duration(150+rand.IntN(600)) * time.Millisecond)
		i := rand.IntN(len(procs))
		procs[i].signal(syscall.SIGKILL)
		procs[i].wait(10 * time.Second)
		t.Logf("kill %d: w%d after %d calls", k+1, i+1, len(srv.recorded()))
		procs[i] = start(t, "run", "--consumer", "w"+strconv.Itoa(i+1), "--log-level", "warn", cfg)
	}
	feed.Wait()

	ids := make([]string, wfChaosRuns)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%03d", i)
	}
	eventually(t, wfChaosSettle, "every run completed", func() bool {
		return wfCountStatus(t, e, ids, "completed") == len(ids)
	})
	for _, p := range procs {
		stopProc(t, p)
	}
	wfChaosCheckHistories(t, e, ids, srv.recorded())
	for _, s := range wfChaosSteps {
		if n := e.stepPending("chaos", s); n != 0 {
			t.Errorf("step %s: %d pending", s, n)
		}
	}
	if n := e.rdb.XLen(e.ctx, "flowrun:{chaos}:dead").Val(); n != 0 {
		t.Errorf("%d dead letters", n)
	}
	// One run through the command line, as a user reads it.
	r, ok := runsShow(t, cfg, "chaos", ids[0])
	if !ok || r.Status != "completed" || !slices.Equal(r.finished(), wfChaosSteps) {
		t.Errorf("runs show %s: %+v", ids[0], r)
	}
}

// wfBody is what the chaos steps send their http handler.
type wfBody struct {
	Run   string `json:"run"`
	Step  string `json:"step"`
	Visit int    `json:"visit"`
}

// wfCountStatus counts the runs of ids whose status in Redis is st.
func wfCountStatus(t *testing.T, e *streamEnv, ids []string, st string) int {
	cmds := make([]*redis.StringCmd, len(ids))
	e.rdb.Pipelined(e.ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGet(e.ctx, "flowrun:{chaos}:run:"+id, "status")
		}
		return nil
	})
	n := 0
	for _, c := range cmds {
		if c.Val() == st {
			n++
		}
	}
	return n
}

// wfChaosCheckHistories checks every run's history in Redis against the handler calls the
// server recorded.
func wfChaosCheckHistories(t *testing.T, e *streamEnv, ids []string, calls []wfCall) {
	t.Helper()
	byVisit := map[string][]wfCall{} // run/step -> calls
	for _, c := range calls {
		var b wfBody
		if err := json.Unmarshal([]byte(c.Body), &b); err != nil {
			t.Fatalf("a call's body %q: %v", c.Body, err)
		}
		want := fmt.Sprintf("chaos/%s/%s/%d", b.Run, b.Step, b.Visit)
		if c.Key != want {
			t.Errorf("a call of %s/%s visit %d carried Idempotency-Key %q, want %q", b.Run, b.Step, b.Visit, c.Key, want)
		}
		if i := slices.Index(wfChaosSteps, b.Step); i < 0 || b.Visit != i+1 {
			t.Errorf("a call of step %q at visit %d: the steps are visits 1, 2, 3", b.Step, b.Visit)
		}
		byVisit[b.Run+"/"+b.Step] = append(byVisit[b.Run+"/"+b.Step], c)
	}
	repeated := 0
	for k, cs := range byVisit {
		repeated += len(cs) - 1
		for _, c := range cs[1:] {
			if c.Key != cs[0].Key {
				t.Errorf("%s: a repeated call carried %q, the first %q", k, c.Key, cs[0].Key)
			}
		}
	}
	t.Logf("%d handler calls for %d visits: %d repeated", len(calls), len(byVisit), repeated)

	hists := make([]*redis.StringSliceCmd, len(ids))
	e.rdb.Pipelined(e.ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			hists[i] = p.LRange(e.ctx, "flowrun:{chaos}:hist:"+id, 0, -1)
		}
		return nil
	})
	bad := 0
	for i, id := range ids {
		var acks []wfEvent
		for _, raw := range hists[i].Val() {
			var ev wfEvent
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				t.Fatalf("run %s: history entry %q: %v", id, raw, err)
			}
			switch ev.Outcome {
			case "ack":
				acks = append(acks, ev)
			case "started", "completed", "retry", "retry_after":
			default:
				t.Errorf("run %s: history outcome %q", id, ev.Outcome)
			}
		}
		ok := len(acks) == len(wfChaosSteps)
		for j := 0; ok && j < len(acks); j++ {
			ok = acks[j].Step == wfChaosSteps[j] && acks[j].Visit == j+1
		}
		if !ok {
			if bad++; bad <= 5 {
				t.Errorf("run %s: finished %+v, want one, two, three once each at visits 1, 2, 3", id, acks)
			}
			continue
		}
		// No step's handler ran before the step before it finished.
		for j := 1; j < len(acks); j++ {
			cs := byVisit[id+"/"+wfChaosSteps[j]]
			if len(cs) == 0 {
				t.Errorf("run %s: step %s finished with no handler call", id, wfChaosSteps[j])
				continue
			}
			if first := cs[0].At; first.Before(acks[j-1].At.Add(-time.Millisecond)) {
				t.Errorf("run %s: %s called at %v, before %s finished at %v", id, wfChaosSteps[j], first, wfChaosSteps[j-1], acks[j-1].At)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%d runs in all with a wrong history", bad)
	}
}
