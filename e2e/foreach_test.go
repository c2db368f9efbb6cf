package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// for_each steps through the binary (issue 28, item 2): outputs joined in element order, each
// element called with its key, at most concurrency calls at once per process, max_items and a
// dead element failing the run, and the join exactly once under kill -9.

// feBody is what the fan-out steps send their http handler.
type feBody struct {
	Run   string `json:"run"`
	Item  string `json:"item"`
	Index int    `json:"index"`
	Visit int    `json:"visit"`
}

// feWorkflow is a workflow "fan": a for_each http step "send" over input.to, then a rules step
// "after" recording the list's length.
func feWorkflow(url string, extra string) string {
	return fmt.Sprintf(`workflow "fan" {
  run_id = "payload.id"
%s
  step "send" {
    for_each     = "input.to"
    payload      = "{'run': run.id, 'item': item, 'index': index, 'visit': run.visit}"
    max_items    = 12
    max_attempts = 1000
%s    handler "http" {
      url = %q
    }
    next = "after"
  }

  step "after" {
    rule "count" {
      output = "len(steps.send)"
    }
  }
}
`, wfStart, extra, url)
}

func feStart(e *streamEnv, id string, items []string) {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"id": id, "to": items})
	e.order(string(b))
}

// feAcks counts the history entries of step with outcome ack.
func feAcks(r *wfRun, step string) int {
	n := 0
	for _, ev := range r.History {
		if ev.Step == step && ev.Outcome == "ack" {
			n++
		}
	}
	return n
}

func TestWorkflowForEach(t *testing.T) {
	e := newStreamEnv(t)
	var inflight, most atomic.Int32
	srv := newWFServer(t, func(c wfCall) (int, string) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		var b feBody
		json.Unmarshal([]byte(c.Body), &b)
		if b.Item == "bounce" {
			return 400, `{"error":"bounced"}`
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // finish out of order
		return 200, fmt.Sprintf(`{"sent":%q,"i":%d}`, b.Item, b.Index)
	})
	cfg := e.wfConfig(feWorkflow(srv.URL, "    concurrency  = 2\n"))
	p := start(t, "run", "--consumer", "w1", cfg)
	defer stopProc(t, p)

	items := map[string][]string{}
	for _, id := range []string{"a", "b", "c"} {
		for i := range 6 {
			items[id] = append(items[id], fmt.Sprintf("%s%d@x", id, i))
		}
		feStart(e, id, items[id])
	}
	feStart(e, "empty", []string{})
	feStart(e, "many", strings.Split("1,2,3,4,5,6,7,8,9,10,11,12,13", ","))
	feStart(e, "dead", []string{"ok@x", "bounce", "ok2@x"})

	for _, id := range []string{"a", "b", "c"} {
		r := waitRun(t, cfg, "fan", id, "completed", "failed")
		if r.Status != "completed" || !slices.Equal(r.finished(), []string{"send", "after"}) || feAcks(r, "send") != 1 {
			t.Fatalf("run %s: %s %q, history %+v", id, r.Status, r.Error, r.History)
		}
		var out []struct {
			Sent string
			I    int
		}
		r.output(t, "send", &out)
		if len(out) != len(items[id]) {
			t.Fatalf("run %s: output %+v", id, out)
		}
		for i, o := range out {
			if o.Sent != items[id][i] || o.I != i {
				t.Errorf("run %s: output %d = %+v, want %s (element order)", id, i, o, items[id][i])
			}
		}
		var n int
		r.output(t, "after", &n)
		if n != len(items[id]) {
			t.Errorf("run %s: after saw %d elements", id, n)
		}
	}
	calls := srv.recorded()
	seen := map[string]int{}
	for _, c := range calls {
		var b feBody
		json.Unmarshal([]byte(c.Body), &b)
		if want := fmt.Sprintf("fan/%s/send/1/%d", b.Run, b.Index); c.Key != want {
			t.Errorf("call of %s element %d carried Idempotency-Key %q, want %q", b.Run, b.Index, c.Key, want)
		}
		seen[c.Key]++
	}
	for _, id := range []string{"a", "b", "c"} {
		for i := range items[id] {
			if k := fmt.Sprintf("fan/%s/send/1/%d", id, i); seen[k] != 1 {
				t.Errorf("element %s called %d times, want once", k, seen[k])
			}
		}
	}
	if m := most.Load(); m > 2 {
		t.Errorf("%d element handlers ran at once, more than the step's concurrency 2", m)
	}

	r := waitRun(t, cfg, "fan", "empty", "completed", "failed")
	if r.Status != "completed" || string(r.Steps["send"]) != "[]" {
		t.Errorf("empty list: %s, send = %s", r.Status, r.Steps["send"])
	}
	r = waitRun(t, cfg, "fan", "many", "completed", "failed")
	if r.Status != "failed" || r.Error != "for_each gave 13 elements, more than max_items (12)" {
		t.Errorf("too many: %s %q", r.Status, r.Error)
	}
	for _, c := range srv.recorded() {
		if strings.Contains(c.Key, "/many/") {
			t.Errorf("an element of a list over max_items ran: %s", c.Key)
		}
	}
	r = waitRun(t, cfg, "fan", "dead", "completed", "failed")
	if r.Status != "failed" || !strings.Contains(r.Error, "400") || feAcks(r, "send") != 0 {
		t.Errorf("dead element: %s %q, history %+v", r.Status, r.Error, r.History)
	}
	eventually(t, wfDeadline, "nothing pending", func() bool { return e.stepPending("fan", "send") == 0 })
	var deadRuns []string
	for _, m := range e.rdb.XRange(e.ctx, "flowrun:{fan}:dead", "-", "+").Val() {
		deadRuns = append(deadRuns, fmt.Sprint(m.Values["x-run-id"], "/", m.Values["index"]))
	}
	slices.Sort(deadRuns)
	if !slices.Equal(deadRuns, []string{"dead/1", "many/<nil>"}) {
		t.Errorf("dead letters (run/index) = %v", deadRuns)
	}
}

const (
	feChaosRuns  = 36
	feChaosKills = 6
)

// TestWorkflowForEachChaos: dozens of runs of fan-outs of 5 to 10 elements on two processes
// sharing the workflow, one or the other killed with SIGKILL at random moments and restarted.
// Every run completes; its output lists every element once, in order; the fan-out step's
// finish appears once in its history; the join hash counted each element once; every call of
// an element carried that element's key.
func TestWorkflowForEachChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos under -short")
	}
	e := newStreamEnv(t)
	srv := newWFServer(t, func(c wfCall) (int, string) {
		time.Sleep(time.Duration(10+rand.IntN(40)) * time.Millisecond) // kills land during calls too
		var b feBody
		json.Unmarshal([]byte(c.Body), &b)
		return http.StatusOK, fmt.Sprintf(`{"item":%q,"i":%d}`, b.Item, b.Index)
	})
	cfg := e.wfConfig(feWorkflow(srv.URL, "    concurrency  = 4\n"))
	addrs := []string{freeAddr(t), freeAddr(t)}
	run := func(i int) *proc {
		p := start(t, "run", "--consumer", "w"+strconv.Itoa(i+1), "--log-level", "warn", "--http-addr", addrs[i], cfg)
		// Up (its signals handled) before the next kill or the final stop.
		eventually(t, 10*time.Second, "flowrun w"+strconv.Itoa(i+1)+" up", func() bool {
			code, _ := httpGet("http://" + addrs[i] + "/healthz")
			return code == http.StatusOK
		})
		return p
	}
	procs := []*proc{run(0), run(1)}
	ids := make([]string, feChaosRuns)
	lists := map[string][]string{}
	var feed sync.WaitGroup
	feed.Add(1)
	go func() {
		defer feed.Done()
		for i := range ids {
			ids[i] = fmt.Sprintf("r%02d", i)
			for j := range 5 + i%6 {
				lists[ids[i]] = append(lists[ids[i]], fmt.Sprintf("%s-%d", ids[i], j))
			}
			feStart(e, ids[i], lists[ids[i]])
			time.Sleep(60 * time.Millisecond)
		}
	}()
	for k := range feChaosKills {
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
		i := rand.IntN(len(procs))
		procs[i].signal(syscall.SIGKILL)
		procs[i].wait(10 * time.Second)
		t.Logf("kill %d: w%d after %d calls", k+1, i+1, len(srv.recorded()))
		procs[i] = run(i)
	}
	feed.Wait()
	eventually(t, wfChaosSettle, "every run completed", func() bool {
		n := 0
		for _, id := range ids {
			if e.rdb.HGet(e.ctx, "flowrun:{fan}:run:"+id, "status").Val() == "completed" {
				n++
			}
		}
		return n == len(ids)
	})
	for _, p := range procs {
		stopProc(t, p)
	}

	repeated := 0
	byKey := map[string]int{}
	for _, c := range srv.recorded() {
		var b feBody
		json.Unmarshal([]byte(c.Body), &b)
		if want := fmt.Sprintf("fan/%s/send/1/%d", b.Run, b.Index); c.Key != want || b.Item != lists[b.Run][b.Index] {
			t.Errorf("a call of %s element %d (%s) carried %q, want %q", b.Run, b.Index, b.Item, c.Key, want)
		}
		if byKey[c.Key]++; byKey[c.Key] > 1 {
			repeated++
		}
	}
	t.Logf("%d element calls, %d repeated", len(srv.recorded()), repeated)
	for _, id := range ids {
		hist := e.rdb.LRange(e.ctx, "flowrun:{fan}:hist:"+id, 0, -1).Val()
		var sends, afters int
		for _, raw := range hist {
			var ev wfEvent
			if err := json.Unmarshal([]byte(raw), &ev); err != nil {
				t.Fatalf("run %s: history %q: %v", id, raw, err)
			}
			if ev.Outcome == "ack" && ev.Step == "send" {
				sends++
			}
			if ev.Outcome == "ack" && ev.Step == "after" {
				afters++
			}
		}
		if sends != 1 || afters != 1 {
			t.Errorf("run %s: send finished %d times, after %d; want once each", id, sends, afters)
		}
		var out []struct {
			Item string
			I    int
		}
		if err := json.Unmarshal([]byte(e.rdb.HGet(e.ctx, "flowrun:{fan}:out:"+id, "send").Val()), &out); err != nil {
			t.Fatalf("run %s: output: %v", id, err)
		}
		want := lists[id]
		ok := len(out) == len(want)
		for j := 0; ok && j < len(out); j++ {
			ok = out[j].Item == want[j] && out[j].I == j
		}
		if !ok {
			t.Errorf("run %s: output %+v, want %v in order", id, out, want)
		}
		for j := range want {
			if byKey[fmt.Sprintf("fan/%s/send/1/%d", id, j)] == 0 {
				t.Errorf("run %s: element %d never called", id, j)
			}
		}
		// The join hash (until hygiene deletes it) counted each element once.
		if fe := e.rdb.HGetAll(e.ctx, "flowrun:{fan}:fe:"+id+":1").Val(); len(fe) > 0 && (fe["c"] != strconv.Itoa(len(want)) || fe["n"] != fe["c"]) {
			t.Errorf("run %s: join hash n=%s c=%s, want %d each", id, fe["n"], fe["c"], len(want))
		}
	}
	if n := e.rdb.XLen(e.ctx, "flowrun:{fan}:s:after").Val(); n > int64(len(ids)) {
		t.Errorf("after stream holds %d messages for %d runs: a step entered twice", n, len(ids))
	}
	for _, s := range []string{"send", "after"} {
		if n := e.stepPending("fan", s); n != 0 {
			t.Errorf("step %s: %d pending", s, n)
		}
	}
	if n := e.rdb.XLen(e.ctx, "flowrun:{fan}:dead").Val(); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

// validate accepts a for_each step with a handler and refuses one with rules, positioned at
// the for_each, with every problem at once.
func TestValidateForEach(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.hcl", `redis "main" {
  url = "redis://127.0.0.1:1/0"
}

workflow "fan" {
  start {
    source "stream" {
      stream = "albums"
    }
  }
  step "resize" {
    for_each  = "input.images"
    max_items = 50
    handler "http" {
      url = "http://images.internal/resize"
    }
  }
}
`)
	if r := flowrun(t, "", "validate", good); r.code != 0 || r.stdout != "ok: 0 pipelines, 1 workflows\n" {
		t.Fatalf("validate good: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	bad := writeFile(t, dir, "bad.hcl", `redis "main" {
  url = "redis://127.0.0.1:1/0"
}

workflow "fan" {
  start {
    source "stream" {
      stream = "albums"
    }
  }
  step "resize" {
    for_each = "input.images"
    rule "r" {
      output = "item"
    }
    next = "after"
  }
  step "after" {
    max_items = 3
    handler "http" {
      url = "http://images.internal/publish"
    }
  }
}
`)
	r := flowrun(t, "", "validate", bad)
	lines := errorLines(r.stderr)
	if r.code != 1 || len(lines) != 2 || !strings.HasPrefix(lines[0], bad+":12:5: error:") || !strings.Contains(lines[0], "cannot have rules") ||
		!strings.HasPrefix(lines[1], bad+":19:5: error:") || !strings.Contains(lines[1], `needs "for_each"`) {
		t.Fatalf("validate bad: exit %d, errors %q\n%s", r.code, lines, r.stderr)
	}
}
